"""Dependencies (docs/dependencies.md): what a package spec may say, the job and the
derived statuses (spec.py, pure), the work/.deps folders and what is in them (dirs.py),
and the install process run as a task (install.py)."""
