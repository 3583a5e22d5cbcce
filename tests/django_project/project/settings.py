"""A Django project whose database is the one the test gives (SQLJOBS_TEST_DB_URL): a
SQLite file or a PostgreSQL database; sqljobs keeps its jobs there too."""

import os
from urllib.parse import urlsplit

from sqljobs import Retry

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "shop", "sqljobs.contrib.django"]
_url = urlsplit(os.environ["SQLJOBS_TEST_DB_URL"])
if _url.scheme == "sqlite":
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _url.path.removeprefix("/")}
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _url.path.removeprefix("/"),
            "USER": _url.username or "",
            "HOST": _url.hostname or "",
            "PORT": str(_url.port or ""),
        }
    }
TASKS = {
    "default": {
        "BACKEND": "sqljobs.contrib.django.TaskBackend",
        "QUEUES": ["default", "billing"],
    }
}
SQLJOBS = {
    "DATABASE": "default",
    # quick retries, so a failing task is dead within the test's patience
    "APP": {"default_retry": Retry(max_attempts=2, base=0.05)},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
