"""WSGI entry point (no websockets; the ASGI app is the one to deploy)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
application = get_wsgi_application()
