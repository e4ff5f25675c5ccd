"""Reports: read-only consumers of run and sweep directories (tables, plots, HTML/Markdown).

Must not launch runs or change a run directory other than writing its report files.
"""
