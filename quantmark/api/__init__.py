"""quantmark as a library: the CLI's jobs as Python calls (``quantmark.run`` ...), with the
same flags as keyword arguments and typed results in place of printed tables. ``public``
holds the calls, ``flags`` turns keyword arguments into the verb's own parsed flags,
``results`` the typed answers."""
