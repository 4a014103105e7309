"""The scripts folder (docs/scripts.md): its confined file operations (folder.py, with
_history.py and _tree.py), a script header's schedule and name (meta.py), and the notify
helpers shipped into it (ship.py, shipped/)."""
