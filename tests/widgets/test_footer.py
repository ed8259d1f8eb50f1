"""widgets/footer.py: a burst of binding changes (focus moving, tabs switching) rebuilds the footer once per
frame, with the bindings as they are at the end; Textual's own Footer rebuilds it once per change."""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Button, Footer as TextualFooter

from widgets.footer import Footer


class Keyed(Button):
    def __init__(self, n: int) -> None:
        super().__init__(f"b{n}", id=f"b{n}")
        self._bindings.bind(f"f{n}", f"press_{n}", f"key of b{n}")


def burst_app(footer_cls: type) -> App:
    class Burst(App):
        BINDINGS = [Binding("q", "quit", "Quit")]

        def compose(self):
            for n in range(1, 7):
                yield Keyed(n)
            yield footer_cls()

    return Burst()


def count_recomposes(footer: Widget) -> list[int]:
    """The footer's rebuilds from now on, counted in the list's one number."""
    count = [0]
    real = footer.recompose

    async def counted() -> None:
        count[0] += 1
        await real()

    footer.recompose = counted  # type: ignore[method-assign]
    return count


async def recomposes_in_a_burst(footer_cls: type) -> tuple[int, list[str]]:
    app = burst_app(footer_cls)
    async with app.run_test(size=(120, 10)) as pilot:
        await pilot.pause()
        footer = app.query_one(footer_cls)
        count = count_recomposes(footer)
        for n in (1, 2, 3, 4, 5, 6, 4):  # focus moves seven times before the next frame
            app.query_one(f"#b{n}").focus()
        await pilot.pause()
        await pilot.pause()
        keys = [str(k.description) for k in footer.query("FooterKey")]
        return count[0], keys


async def test_a_burst_of_binding_changes_rebuilds_the_footer_once_per_frame_with_the_last_bindings():
    ours, keys = await recomposes_in_a_burst(Footer)
    theirs, their_keys = await recomposes_in_a_burst(TextualFooter)
    # once per frame: the burst's focus events reach the footer over one or two frames (12 signals here)
    assert 1 <= ours <= 3 and theirs >= 7
    assert keys == their_keys and "key of b4" in keys and "key of b6" not in keys


class Toggled(App):
    """A key greyed out while `locked` (check_action), the way the app's panes grey out what they cannot do."""

    BINDINGS = [Binding("q", "quit", "Quit"), Binding("x", "act", "Act")]
    locked = False

    def compose(self):
        yield Keyed(1)
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "act" and self.locked else True


def _keys(footer: Footer) -> list[tuple[str, bool]]:
    return [(str(k.description), k.has_class("-disabled")) for k in footer.query("FooterKey")]


async def test_a_binding_signal_with_the_same_bindings_keeps_the_keys_and_a_real_change_rebuilds_them():
    """The focus Textual sets while the first screen is composed signals again after that screen is up; the
    footer rebuilt the same keys then (a restyle and layout of the whole screen while the pods' probes
    started). Unchanged bindings rebuild nothing; an enabled state, a focus or a key that changes still does."""
    app = Toggled()
    async with app.run_test(size=(120, 10)) as pilot:
        await pilot.pause()
        footer = app.query_one(Footer)
        count = count_recomposes(footer)
        before = list(footer.query("FooterKey"))
        assert ("Act", False) in _keys(footer) and ("key of b1", False) in _keys(footer)
        app.screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert count[0] == 0 and list(footer.query("FooterKey")) == before

        app.locked = True
        app.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert count[0] == 1 and ("Act", True) in _keys(footer)

        app.set_focus(None)  # b1's key goes
        await pilot.pause()
        await pilot.pause()
        assert count[0] == 2 and "key of b1" not in [d for d, _ in _keys(footer)]

        app.bind("y", "other", description="Other")
        app.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert count[0] == 3 and "Other" in [d for d, _ in _keys(footer)]
