"""The old home of the hub app; the hub now lives in the `mempalace_logstream.http` package.

Kept so that `from mempalace_logstream.http_app import create_app` (and every other name
imported from here) keeps working.
"""

from __future__ import annotations

from mempalace_logstream import errors
from mempalace_logstream.http.app import create_app
from mempalace_logstream.http.guard import HubGuard
from mempalace_logstream.http.params import PARAM_SCHEMAS, request_model
from mempalace_logstream.http.responses import ERROR_RESPONSES, STATUS, error_response, status_of
from mempalace_logstream.http.settings import (
    LOOPBACK_NAMES,
    ExtraMount,
    HubSettings,
    check_token,
    is_loopback_host,
    listen_socket,
    version,
)
from mempalace_logstream.http.sse import SSE_PARAMS

__all__ = [
    "ERROR_RESPONSES",
    "LOOPBACK_NAMES",
    "PARAM_SCHEMAS",
    "SSE_PARAMS",
    "STATUS",
    "ExtraMount",
    "HubGuard",
    "HubSettings",
    "check_token",
    "create_app",
    "error_response",
    "errors",
    "is_loopback_host",
    "listen_socket",
    "request_model",
    "status_of",
    "version",
]
