class RequestError(Exception):
    """A request the service refuses; `status` is the HTTP status the API answers with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


class NotFound(RequestError):
    def __init__(self, what: str):
        super().__init__(f"{what} not found", 404)


class Conflict(RequestError):
    def __init__(self, message: str):
        super().__init__(message, 409)


class TooLarge(RequestError):
    def __init__(self, message: str):
        super().__init__(message, 413)
