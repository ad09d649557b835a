"""The runtime's own subcommands of ``lite``: inspect, run, bench."""
