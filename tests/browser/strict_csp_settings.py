"""The live server's settings in browser tests: the app's own, which carry a strict CSP.

Kept as a module so the browser tests name the settings they run under; a CSP violation is a
console error, and the browser tests fail on console errors.
"""

from agentsite.settings import *  # noqa: F403
