"""Every refusal the service makes, as a typed exception that carries its HTTP status.

Services and validation raise these; the API answers any of them as `{"error": message}`
with the class's `status` (webapp/api/errors.py is the only place that turns exceptions into
responses), and the console shows the message. A new kind of refusal, a quota or a rate
limit say, is one more subclass here with its status and the `description` that the
OpenAPI document gives that status.
"""


class RequestError(Exception):
    """A request the service refuses; the message says what to fix."""

    status = 400
    description = "invalid request: the message says what to fix"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Unauthenticated(RequestError):
    status = 401
    description = "missing, invalid or revoked token"


class Forbidden(RequestError):
    status = 403
    description = "refused: a browser session without its CSRF token"


class QuotaExceeded(Forbidden):
    """A per-user quota (active jobs, stored bytes, tuning budget); the message names it and
    its value."""

    description = "over a per-user quota (active jobs, stored bytes or the tuning budget)"


class NotFound(RequestError):
    status = 404
    description = "not found (also for other users' objects, so ids leak nothing)"

    def __init__(self, what: str):
        super().__init__(f"{what} not found")


class Conflict(RequestError):
    status = 409
    description = "the object's state does not allow it (e.g. cancelling a finished job)"


class TooLarge(RequestError):
    status = 413
    description = "the upload or request body is over the limit"


class RateLimited(RequestError):
    status = 429
    description = ("too many requests of this kind: the message names the limit, the "
                   "Retry-After header says when to try again")

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(RequestError):
    status = 503
    description = "a service the request needs (the job queue) is unreachable; try again"
