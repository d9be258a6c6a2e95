"""A service's refusal as the pages answer it: the HTTP status, by the refusal's code.

The API maps the same codes in plans/api/errors.py (REFUSALS).
"""

from __future__ import annotations

from plans.services.refusals import Refused

# Not listed: 409, the request was sound but the moment is not (already decided, the run has
# ended, four-eyes, the arguments or the text refused by the service).
REFUSAL_STATUS = {
    "signed_out": 403,
    "not_a_reviewer": 403,
    "not_in_group": 403,
    "not_an_author": 403,
    "reason_required": 422,
    "goal_invalid": 422,
}


def refusal_status(refused: Refused) -> int:
    return REFUSAL_STATUS.get(refused.code, 409)
