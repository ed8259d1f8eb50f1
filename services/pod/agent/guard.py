"""The gate in front of every script we run on a pod: it runs one only from a directory private to the SSH user
and only once every file of it has the content we uploaded.

A pod's ``probe_dir`` may be shared (``/tmp/ptt`` on a Slurm login node): a name found there proves nothing,
since another user of the pod may have put it there, or a symbolic link to somewhere else. So this source is
never read from the pod: the laptop sends it on the command line (``python3 -c``) with the content hash of each
file, and it

- ``prepare STATE BUNDLE MANIFEST``: makes STATE (the probe_dir) and BUNDLE (the script's directory in it) as
  directories of the SSH user's own with mode 0700, created without following a symbolic link; narrows one of
  ours that others may only read; refuses one that is a link, not ours, writable by others, or under a directory
  someone else can rename it in. Answers one JSON line: ``{"ok": true, "whole": <every file verified>}`` or
  ``{"refused": "<why, for people>"}``.
- ``run GO STATE BUNDLE MANIFEST SCRIPT ARGS...``: checks the same, reads each file once and compares its
  sha256 with MANIFEST (``name:hex,name:hex``), and only then runs SCRIPT's verified bytes as ``__main__`` with
  the bundle first on sys.path (its siblings import by bare name from the private directory) and
  ``PTT_STATE_DIR`` set; GO, when not empty, is printed first. Anything wrong: one JSON line
  ``{"ptt_untrusted": "<why>"}`` and exit 97, nothing run (the laptop then prepares and uploads again).

Python 3.6+ and the standard library only, like the lifecycle helper it runs."""

import hashlib
import json
import os
import stat
import sys

UNTRUSTED = "ptt_untrusted"


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def absolute(path):
    """A pod path as the laptop writes it (relative paths are from the SSH user's home, where a session starts)."""
    path = os.path.expanduser(path)
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(os.path.expanduser("~"), path))


def owner(uid):
    try:
        import pwd

        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except (ImportError, KeyError):
        return "uid %d" % uid


def doubt(path, me, tighten=False):
    """Why the directory ``path`` is not private to ``me``: "" when it is, "missing" when it is not there.
    ``tighten`` narrows one of ours that others may read but not write (an older version made it 0755)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return "%s cannot be read (%s)" % (path, exc.strerror)
    if stat.S_ISLNK(st.st_mode):
        return "%s is a symbolic link" % path
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a directory" % path
    if st.st_uid != me:
        return "%s belongs to %s" % (path, owner(st.st_uid))
    if st.st_mode & 0o022:
        return "%s is writable by other users" % path
    if st.st_mode & 0o077:
        if not tighten:
            return "%s is readable by other users" % path
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            return "%s cannot be made private (%s)" % (path, exc.strerror)
    return ""


def ancestors_doubt(path, me):
    """Why a directory above ``path`` lets someone else swap it: one they own, or one anybody may write to
    without the sticky bit (``/tmp`` has it: only a file's owner may rename it there)."""
    parent = os.path.dirname(path)
    while True:
        try:
            st = os.stat(parent)
        except OSError as exc:
            return "%s cannot be read (%s)" % (parent, exc.strerror)
        if st.st_uid not in (0, me) and not st.st_mode & stat.S_ISVTX:
            return "%s, above it, belongs to %s" % (parent, owner(st.st_uid))
        if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
            return "%s, above it, is writable by everyone" % parent
        if parent == os.path.dirname(parent):
            return ""
        parent = os.path.dirname(parent)


def make_private(path, me):
    """Create ``path`` (mode 0700; its missing parents as the umask says) or check the one there; "" or why not."""
    why = doubt(path, me, tighten=True)
    if why == "missing":
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mkdir(path, 0o700)  # mkdir never follows a link at its last component: EEXIST instead
        except FileExistsError:
            pass  # made meanwhile, by another client of ours or someone else: judged below
        except OSError as exc:
            return "%s cannot be created (%s)" % (path, exc.strerror)
        why = doubt(path, me, tighten=True)
    return why


def verified(bundle, manifest, me):
    """{name: bytes} of the bundle's files when each is a regular file of ours with the expected sha256; else
    the reason it is not."""
    found = {}
    for item in manifest.split(","):
        name, _, digest = item.partition(":")
        path = os.path.join(bundle, name)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return "%s is missing" % path
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != me or st.st_mode & 0o022:
                return "%s is not a private file" % path
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if hashlib.sha256(data).hexdigest() != digest:
            return "%s differs from the uploaded file" % path
        found[name] = data
    return found


def checked(state, bundle, me):
    return doubt(state, me) or ancestors_doubt(state, me) or doubt(bundle, me)


def prepare(state, bundle, manifest):
    me = os.geteuid()
    why = ancestors_doubt(state, me) or make_private(state, me) or make_private(bundle, me)
    if why:
        say({"refused": why})
        return 3
    say({"ok": True, "whole": isinstance(verified(bundle, manifest, me), dict)})
    return 0


def run(go, state, bundle, manifest, script, args):
    me = os.geteuid()
    why = checked(state, bundle, me)
    files = verified(bundle, manifest, me) if not why else why
    if not isinstance(files, dict):
        say({UNTRUSTED: files})
        return 97
    if go:
        sys.stdout.write(go + "\n")
        sys.stdout.flush()
    path = os.path.join(bundle, script)
    code = compile(files[script], path, "exec")
    os.environ["PTT_STATE_DIR"] = state
    sys.dont_write_bytecode = True  # the bundle holds what was uploaded, nothing else
    sys.path[0] = bundle  # not the working directory, which `-c` puts there
    sys.argv = [path] + list(args)
    main = sys.modules["__main__"].__dict__
    builtins = main["__builtins__"]
    main.clear()
    main.update(
        {
            "__name__": "__main__",
            "__file__": path,
            "__builtins__": builtins,
            "__doc__": None,
            "__package__": None,
            "__spec__": None,
            "__loader__": None,
            "__cached__": None,
        }
    )
    exec(code, main)
    return 0


def entry(argv):
    if argv[:1] == ["prepare"] and len(argv) == 4:
        return prepare(absolute(argv[1]), absolute(argv[2]), argv[3])
    if argv[:1] == ["run"] and len(argv) >= 6:
        return run(argv[1], absolute(argv[2]), absolute(argv[3]), argv[4], argv[5], argv[6:])
    say({UNTRUSTED: "the guard was called wrongly"})
    return 2


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
