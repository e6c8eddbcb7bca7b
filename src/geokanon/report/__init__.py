"""Reports: HTML pages, release notes and plots (matplotlib and templating live here only)."""
