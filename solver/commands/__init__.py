"""The `paraplan` command line: the parser and entry point (cli.py), the sub-commands (planning,
groups, extra, partitions, export) and what every command shares (inputs, outputs, limits,
--json output and its schema, verify's verdict). Solving lives one level up, in solver/."""
