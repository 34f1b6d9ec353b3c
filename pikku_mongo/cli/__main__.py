"""``python -m pikku_mongo.cli``: the ``pikku-mongo`` command."""

from pikku_mongo.cli.console import main

raise SystemExit(main())
