"""App-layer pane controllers: one module per pane that needs workers or I/O.

A pane controller is a Textual container that the App composes into its tab. It composes view
widgets from ``widgets/`` (which do no I/O), runs the pane's work in workers that call ``services/``,
and turns results into widget updates. Keeping that here keeps ``app/tui.py`` to composition.
"""
