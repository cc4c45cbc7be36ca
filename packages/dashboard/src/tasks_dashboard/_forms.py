"""What a POST must be before the dashboard acts on it, and the reading of its form.

Each rule refuses before anything is read further or written: a POST a browser marks as
sent from another origin — another site or another port of the host — is 403
(:func:`check_origin`, called by the gate; the operator token as a Bearer header exempts);
a body is read up to its form's cap only, 413 past it (:data:`SMALL_FORM_BYTES`,
:func:`answer_form_bytes`); it must be a form (415) of text fields (400: a file part, a
field given twice, bytes that are not UTF-8); then its CSRF token must match
(:func:`checked_form`, 403).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import Message
from tasks_core import Limits
from tasks_core.authority import MAX_ID_BYTES

from tasks_dashboard._security import CSRF_FIELD, MAX_TOKEN_CHARS, Guard

__all__ = ["SMALL_FORM_BYTES", "BodyTooLarge", "CrossOrigin", "FormRefused", "NotAForm",
           "answer_form_bytes", "check_origin", "checked_form"]

SMALL_FORM_BYTES = 3 * (MAX_TOKEN_CHARS + 3 * MAX_ID_BYTES) + 1024
"""The body cap of the login, logout and cancel forms: a token, a task id or a ``next``
path holding one (percent-encoded twice, in its URL and in the form), each byte sent as up
to three (``%XX``), and 1 KiB for the CSRF token and field names."""
MAX_FIELDS = 16
"""The most fields a form may hold (the dashboard's forms hold at most five)."""
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def answer_form_bytes(limits: Limits) -> int:
    """The body cap of the answer form: what the largest answer the App takes needs.
    ``respond`` takes ``{key: answer}`` of at most ``limits.max_input_bytes`` of JSON — a
    text answer's UTF-8 is never longer than its JSON — so the key and answer, and the task
    id (``MAX_ID_BYTES``), each byte sent as up to three (``%XX``), and
    :data:`SMALL_FORM_BYTES` for the rest. JSON typed with more whitespace than that can
    hold is refused (413): send it compact."""
    return 3 * (limits.max_input_bytes + MAX_ID_BYTES) + SMALL_FORM_BYTES


class CrossOrigin(HTTPException):
    """A POST a browser says comes from another origin than the dashboard's (403): its
    ``Sec-Fetch-Site`` is neither ``same-origin`` nor ``none``, or its ``Origin`` is not
    the scheme, host and port of the request. A page on another port of the same host is
    such an origin: it can set the dashboard's cookies (cookies ignore ports) but not
    this."""

    def __init__(self) -> None:
        super().__init__(403, "refused: this request comes from another origin than the "
                              "dashboard's own (another site, or another port of this host)")


class BodyTooLarge(HTTPException):
    """A POST body larger than its form's cap (413), refused before more of it is read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the form is larger than the {limit} bytes it may take")


class NotAForm(HTTPException):
    """A POST body that is not a form (415): the dashboard's actions take
    ``application/x-www-form-urlencoded`` or ``multipart/form-data`` only."""

    def __init__(self) -> None:
        super().__init__(415, "the body must be a form: application/x-www-form-urlencoded "
                              "or multipart/form-data")


class FormRefused(HTTPException):
    """A form the dashboard does not read (400): a file part, a field given twice, more
    than :data:`MAX_FIELDS` fields, or bytes that are not UTF-8."""

    def __init__(self, why: str) -> None:
        super().__init__(400, f"bad form: {why}")


def _origin(scheme: str, host: str) -> str:
    """``scheme://host`` in lower case, without the scheme's default port."""
    origin = f"{scheme}://{host}".lower()
    port = DEFAULT_PORTS.get(scheme.lower(), "")
    return origin[:-len(port)] if port and origin.endswith(port) else origin


def check_origin(request: Request) -> None:
    """Refuse a POST (any method but GET, HEAD, OPTIONS) that a browser marks as sent from
    another origin. Requests without the headers (scripts) pass; so does one the gate let
    in by the operator token as a Bearer header (a browser never sends it on its own).

    Raises:
        CrossOrigin: ``Sec-Fetch-Site`` present and not ``same-origin`` or ``none``, or
            ``Origin`` present and not the request's scheme, host and port.
    """
    if request.method in SAFE_METHODS or Guard.let_in_by_bearer(request):
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.lower() not in ("same-origin", "none"):
        raise CrossOrigin()
    origin = request.headers.get("origin")
    if origin is not None and _origin(*origin.partition("://")[::2]) != _origin(
            request.url.scheme, request.headers.get("host", "")):
        raise CrossOrigin()


async def _body(request: Request, limit: int) -> bytes:
    """The body of ``request``, read no further than ``limit`` bytes.

    Raises:
        BodyTooLarge: a ``Content-Length`` over ``limit``, or more bytes streamed.
        FormRefused: a ``Content-Length`` that is not a number.
    """
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise FormRefused("Content-Length is not a number")
    if declared is not None and int(declared) > limit:
        raise BodyTooLarge(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(limit)
    return bytes(body)


async def _fields(request: Request, body: bytes) -> list[tuple[str, object]]:
    """The fields of the form ``body`` (already read, within its cap).

    Raises:
        NotAForm: another content type.
        FormRefused: a file part, too many fields, bytes that are not UTF-8.
    """
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind not in FORMS:
        raise NotAForm()
    try:
        if kind == FORMS[0]:
            return list(parse_qsl(body.decode(), keep_blank_values=True, errors="strict",
                                  max_num_fields=MAX_FIELDS))

        async def replay() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        form = await Request(request.scope, replay).form(max_files=0, max_fields=MAX_FIELDS)
        return list(form.multi_items())
    except UnicodeDecodeError:
        raise FormRefused("its text is not UTF-8") from None
    except ValueError:  # parse_qsl past max_num_fields
        raise FormRefused(f"more than {MAX_FIELDS} fields") from None
    except HTTPException as refused:  # starlette's: a file part (max_files=0), a bad part
        detail = str(refused.detail)
        raise FormRefused("a file part: the fields must be text" if "files" in detail
                          else detail) from None


async def checked_form(guard: Guard, request: Request, limit: int) -> Mapping[str, str]:
    """The POSTed form of ``request`` — its body read up to ``limit`` bytes, text fields
    only, each given once — once its CSRF token matches the browser's CSRF cookie
    (:meth:`Guard.csrf_matches`). A request the gate let in by the operator token as
    ``Authorization: Bearer`` without a session cookie needs none: browsers never send that
    header on their own. Any other ``Authorization`` (HTTP Basic an ``authorize`` callback
    accepts: browsers do resend cached credentials) needs it like a session cookie.

    Raises:
        BodyTooLarge: a body over ``limit`` (413).
        NotAForm: a body that is not a form (415).
        FormRefused: a file part or any value that is not text, a field given twice, too
            many fields, bytes that are not UTF-8 (400).
        HTTPException: 403 without a matching CSRF token.
    """
    form: dict[str, str] = {}
    for name, value in await _fields(request, await _body(request, limit)):
        if not isinstance(value, str):
            raise FormRefused(f"the field {name[:40]!r} is not text")
        if name in form:
            raise FormRefused(f"the field {name[:40]!r} is given twice")
        form[name] = value
    if Guard.let_in_by_bearer(request) and guard.auth_cookie not in request.cookies:
        return form
    if not guard.csrf_matches(request, form.get(CSRF_FIELD)):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    return form
