"""Command modules of the ``ccjax`` CLI: each holds one verb's parser and its command
(``add_<verb>(subparsers)``, ``cmd_<verb>(args)``); ``ccjax.cli`` registers them."""
