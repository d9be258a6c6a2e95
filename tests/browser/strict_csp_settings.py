"""The live server's settings in browser tests: the app's own, under a strict CSP.

The app sends no Content-Security-Policy yet; serving the browser tests under one proves the
pages need no inline script, style, handler or eval (a violation is a console error, and the
browser tests fail on console errors).
"""

from agentsite.settings import *  # noqa: F403
from agentsite.settings import MIDDLEWARE

MIDDLEWARE = [*MIDDLEWARE, "django.middleware.csp.ContentSecurityPolicyMiddleware"]
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
