"""A LiteLLM callback that sends one laneledger attempt per try, retries and fallbacks included.

    import litellm
    from laneledger_callback import LaneledgerLogger

    litellm.callbacks = [LaneledgerLogger(
        url="http://127.0.0.1:8080", token=os.environ["LANELEDGER_TOKEN"],
        idem_key_field="idempotency_key",          # or idem_key_header="Idempotency-Key"
    )]

Each try LiteLLM makes (a Router's retries, its fallbacks to another model group) becomes one
attempt record (laneledger's native NDJSON shape) posted to ``POST {url}/v1/attempts`` with a
bearer token, from a background thread: the callback never blocks the event loop, and a network
error is logged and retried a little, never raised into the application.

Fields:
  job_id       the LiteLLM trace id (``litellm_trace_id``: every try of one request shares it), or
               the metadata field named by ``job_id_field``
  idem_key     the metadata field ``idem_key_field`` or the request header ``idem_key_header``;
               never invented (a try without one is sent without it and laneledger rejects it,
               saying ``idem_key: missing``)
  attempt_no   counted here, per job id, in the order the tries start (1, 2, 3, ...). LiteLLM's own
               ``attempted_retries`` counts retries within one model group and starts again at 0
               on a fallback, so it is not the attempt number; it is kept beside it as the extra
               field ``litellm_attempted_retries`` (with ``litellm_attempted_fallbacks``)
  lane         ``lanes[model_group]``; without an entry, a group named ``free`` or ending in
               ``:free`` is free, anything else paid
  outcome      success: ok; RateLimitError, 429 or 503: retryable; Timeout: ambiguous; else
               permanent
  http_status  200 on success, the error's status code on failure, 0 when no response came (a
               timeout or a connection error)
  provider_code  a provider's business code quoted in the error text (``"code": "1305"``)
  tokens_in/out  the response's usage (absent on a failure)
  artifact_id  the response id (``chatcmpl-...``) on success
  model, key_id, pool_id  the model sent to the provider, the Router deployment id, the model group

Configuration from the environment (for the LiteLLM proxy's ``callbacks:`` list, which names a
module attribute): ``laneledger_callback.proxy_handler_instance`` is built on first use from
LANELEDGER_URL, LANELEDGER_TOKEN, LANELEDGER_IDEM_KEY_FIELD, LANELEDGER_IDEM_KEY_HEADER,
LANELEDGER_JOB_ID_FIELD and LANELEDGER_LANES (a JSON object, model group -> free|paid).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import re
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

__all__ = ["LaneledgerLogger", "classify", "provider_code_of"]

log = logging.getLogger("laneledger")

# A provider's business code quoted in an error text, JSON or JSON inside a string:
# "code": "1305", 'code': 1305, \"code\":\"1305\".
_CODE = re.compile(r"""\\?["']code\\?["']\s*:\s*\\?["']?(\d{1,9})(?!\d)""")


def provider_code_of(text: str) -> int | None:
    """The first ``"code": "NNNN"`` business code quoted in an error text, or None."""
    m = _CODE.search(text or "")
    return int(m.group(1)) if m else None


def _status_of(exc: BaseException | None) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def classify(exc: BaseException | None) -> tuple[str, int | None]:
    """(outcome, http_status) of a failed try's exception.

    Timeout: ambiguous (the provider may have done the work), http_status 0 (no response);
    RateLimitError, 429 or 503: retryable; anything else permanent. A connection error that got
    no response has http_status 0 (LiteLLM gives it 500).
    """
    import litellm

    if isinstance(exc, litellm.Timeout):
        return "ambiguous", 0
    status = _status_of(exc)
    if isinstance(exc, litellm.APIConnectionError):
        status = 0
    if isinstance(exc, (litellm.RateLimitError, litellm.ServiceUnavailableError)) or status in (429, 503):
        return "retryable", status
    return "permanent", status


def default_lane(model_group: str | None) -> str:
    """``free`` for a group named ``free`` or ending in ``:free``, else ``paid``."""
    g = (model_group or "").strip().lower()
    return "free" if g == "free" or g.endswith(":free") else "paid"


def _rfc3339(t: Any) -> str | None:
    """A LiteLLM time (a datetime, naive means local time, or epoch seconds) in RFC 3339 UTC."""
    if isinstance(t, (int, float)):
        t = datetime.fromtimestamp(t, tz=timezone.utc)
    if not isinstance(t, datetime):
        return None
    return t.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _lookup_header(containers: list[Any], name: str) -> str | None:
    want = name.lower()
    for c in containers:
        if isinstance(c, dict):
            for k, v in c.items():
                if isinstance(k, str) and k.lower() == want and v not in (None, ""):
                    return str(v)
    return None


class _Bounded(OrderedDict):
    """An insertion-ordered dict that forgets its oldest entries past ``limit``."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def put(self, key, value):
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class LaneledgerLogger(CustomLogger):
    """Posts one laneledger attempt per LiteLLM try (see the module's doc for each field).

    url: laneledger's base URL (``http://127.0.0.1:8080``); records go to ``{url}/v1/attempts``.
    token: the bearer token of ``laneledger serve``.
    idem_key_field / idem_key_header: where the idempotency key is: a ``metadata`` field of the
        request, or a request header (matched without regard to case; on the LiteLLM proxy, the
        client's request headers).
    job_id_field: a ``metadata`` field holding the job id; by default LiteLLM's trace id.
    lanes: model group -> ``free`` | ``paid``; groups not listed follow :func:`default_lane`.
    timeout, retries: per POST; a failed POST (no answer, 5xx, 503) is tried ``retries`` more
        times with a growing pause, then its records are dropped with an error in the log.
    max_jobs: jobs whose try count is remembered (the oldest are forgotten first).
    queue_size: records waiting to be sent; past it, new records are dropped (logged).
    """

    def __init__(
        self,
        url: str,
        token: str,
        idem_key_field: str | None = None,
        idem_key_header: str | None = None,
        job_id_field: str | None = None,
        lanes: dict[str, str] | None = None,
        timeout: float = 5.0,
        retries: int = 2,
        max_jobs: int = 100_000,
        queue_size: int = 10_000,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if not url:
            raise ValueError("laneledger: url is required (e.g. http://127.0.0.1:8080)")
        if not token:
            raise ValueError("laneledger: token is required (the LANELEDGER_TOKEN of laneledger serve)")
        self.endpoint = url.rstrip("/") + "/v1/attempts"
        self.token = token
        self.idem_key_field = idem_key_field
        self.idem_key_header = idem_key_header
        self.job_id_field = job_id_field
        self.lanes = dict(lanes or {})
        for group, lane in self.lanes.items():
            if lane not in ("free", "paid"):
                raise ValueError(f"laneledger: lanes[{group!r}] is {lane!r}, not free or paid")
        self.timeout = timeout
        self.retries = retries
        self._lock = threading.Lock()
        self._tries = _Bounded(max_jobs)  # job id -> tries started
        self._numbers = _Bounded(max_jobs)  # litellm_call_id -> (job id, attempt_no)
        self._sent = _Bounded(max_jobs)  # litellm_call_id already recorded
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.posted = 0  # records laneledger answered for
        self.dropped = 0  # records given up on (queue full, or the POST failed every time)
        self.refused = 0  # records laneledger rejected or found in conflict
        self._warned_no_key = False
        self._thread = threading.Thread(target=self._run, name="laneledger-sender", daemon=True)
        self._thread.start()
        atexit.register(self.flush, 5.0)

    # LiteLLM's hooks ---------------------------------------------------------------------------

    def log_pre_api_call(self, model, messages, kwargs):
        """Numbers the try as it starts (LiteLLM calls this once per try, sync and async)."""
        try:
            call_id = kwargs.get("litellm_call_id") or (kwargs.get("litellm_params") or {}).get("litellm_call_id")
            job_id = self._job_id(kwargs)
            if call_id and job_id:
                with self._lock:
                    if call_id not in self._numbers:
                        self._numbers.put(call_id, (job_id, self._next_try(job_id)))
        except Exception:  # never break the user's call
            log.exception("laneledger: numbering a try failed")

    def log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._record(kwargs, response_obj, start_time, end_time, None)

    def log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._record(kwargs, response_obj, start_time, end_time, kwargs.get("exception"))

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._record(kwargs, response_obj, start_time, end_time, None)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._record(kwargs, response_obj, start_time, end_time, kwargs.get("exception"))

    # Building records ---------------------------------------------------------------------------

    def _next_try(self, job_id: str) -> int:
        n = self._tries.get(job_id, 0) + 1
        self._tries.put(job_id, n)
        return n

    @staticmethod
    def _metadata(kwargs: dict) -> dict:
        lp = kwargs.get("litellm_params") or {}
        md = lp.get("metadata") or kwargs.get("metadata") or {}
        return md if isinstance(md, dict) else {}

    def _job_id(self, kwargs: dict) -> str | None:
        if self.job_id_field:
            v = self._metadata(kwargs).get(self.job_id_field)
            if v not in (None, ""):
                return str(v)
        lp = kwargs.get("litellm_params") or {}
        slo = kwargs.get("standard_logging_object") or {}
        for v in (kwargs.get("litellm_trace_id"), lp.get("litellm_trace_id"), slo.get("trace_id")):
            if v:
                return str(v)
        return None

    def _idem_key(self, kwargs: dict) -> str | None:
        md = self._metadata(kwargs)
        if self.idem_key_field:
            v = md.get(self.idem_key_field)
            if v not in (None, ""):
                return str(v)
        if self.idem_key_header:
            lp = kwargs.get("litellm_params") or {}
            psr = lp.get("proxy_server_request") or kwargs.get("proxy_server_request") or {}
            optional = kwargs.get("optional_params") or {}
            return _lookup_header(
                [
                    md.get("headers"),
                    psr.get("headers") if isinstance(psr, dict) else None,
                    kwargs.get("headers"),
                    optional.get("extra_headers"),
                    md.get("requester_custom_headers"),
                ],
                self.idem_key_header,
            )
        return None

    def attempt_of(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any, exc: Any) -> dict | None:
        """The attempt record of one try (None when the try was already recorded)."""
        lp = kwargs.get("litellm_params") or {}
        md = self._metadata(kwargs)
        call_id = kwargs.get("litellm_call_id") or lp.get("litellm_call_id")
        job_id = self._job_id(kwargs)
        with self._lock:
            if call_id:
                if call_id in self._sent:
                    return None
                self._sent.put(call_id, True)
            numbered = self._numbers.pop(call_id, None) if call_id else None
            if numbered and numbered[0] == job_id:
                attempt_no = numbered[1]
            else:
                attempt_no = self._next_try(job_id or "")
        group = md.get("model_group") or kwargs.get("model")
        lane = self.lanes.get(group) or default_lane(group)
        rec: dict[str, Any] = {"job_id": job_id}
        idem = self._idem_key(kwargs)
        if idem is not None:
            rec["idem_key"] = idem
        elif not self._warned_no_key:
            self._warned_no_key = True
            where = self.idem_key_field or self.idem_key_header
            log.warning(
                "laneledger: no idempotency key found%s; laneledger rejects attempts without one "
                "(set idem_key_field= or idem_key_header=)",
                f" in {where!r}" if where else "",
            )
        rec["attempt_no"] = attempt_no
        rec["lane"] = lane
        started, ended = _rfc3339(start_time), _rfc3339(end_time)
        if started:
            rec["started_at"] = started
        if ended:
            rec["ended_at"] = ended
        if exc is None:
            rec["outcome"] = "ok"
            rec["http_status"] = 200
            usage = getattr(response_obj, "usage", None)
            if usage is not None:
                if isinstance(getattr(usage, "prompt_tokens", None), int):
                    rec["tokens_in"] = usage.prompt_tokens
                if isinstance(getattr(usage, "completion_tokens", None), int):
                    rec["tokens_out"] = usage.completion_tokens
            rid = getattr(response_obj, "id", None)
            if rid:
                rec["artifact_id"] = str(rid)
        else:
            outcome, status = classify(exc)
            rec["outcome"] = outcome
            if status is not None:
                rec["http_status"] = status
            code = provider_code_of(str(exc))
            if code is not None:
                rec["provider_code"] = code
            rec["error_class"] = type(exc).__name__
        if kwargs.get("model"):
            rec["model"] = str(kwargs["model"])
        deployment = (lp.get("model_info") or {}).get("id")
        if deployment:
            rec["key_id"] = str(deployment)
        if md.get("model_group"):
            rec["pool_id"] = str(md["model_group"])
        if call_id:
            rec["litellm_call_id"] = str(call_id)
        for name in ("attempted_retries", "attempted_fallbacks"):
            if isinstance(md.get(name), int):
                rec["litellm_" + name] = md[name]
        return rec

    def _record(self, kwargs, response_obj, start_time, end_time, exc):
        try:
            rec = self.attempt_of(kwargs, response_obj, start_time, end_time, exc)
            if rec is None:
                return
            try:
                self._queue.put_nowait(rec)
            except queue.Full:
                with self._lock:
                    self.dropped += 1
                log.error("laneledger: %d records waiting; dropped job %s attempt %s", self._queue.maxsize,
                          rec.get("job_id"), rec.get("attempt_no"))
        except Exception:  # never break the user's call
            log.exception("laneledger: recording a try failed")

    # Sending ------------------------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Waits until every record queued so far was sent (or given up on); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _run(self):
        while True:
            batch = [self._queue.get()]
            while len(batch) < 500:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._send(batch)
            except Exception:
                log.exception("laneledger: sending %d records failed; dropped", len(batch))
                with self._lock:
                    self.dropped += len(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _send(self, batch: list[dict]):
        body = "\n".join(json.dumps(r, separators=(",", ":")) for r in batch).encode()
        request = urllib.request.Request(
            self.endpoint,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-ndjson"},
        )
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as r:
                    self._answered(batch, r.status, r.read())
                return
            except urllib.error.HTTPError as e:
                if e.code < 500:
                    # 207 is a success status for urllib; a 4xx here is auth, size or a bad body.
                    with self._lock:
                        self.dropped += len(batch)
                    log.error("laneledger: %s answered %d: %s; %d records dropped", self.endpoint, e.code,
                              e.read()[:500].decode(errors="replace"), len(batch))
                    return
                error = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError) as e:
                error = str(e)
            if attempt < self.retries:
                time.sleep(0.5 * 2**attempt)
        with self._lock:
            self.dropped += len(batch)
        log.error("laneledger: %s unreachable (%s) after %d tries; %d records dropped", self.endpoint, error,
                  self.retries + 1, len(batch))

    def _answered(self, batch: list[dict], status: int, body: bytes):
        refused = 0
        try:
            for result in json.loads(body).get("results", []):
                if result.get("result") in ("rejected", "conflict"):
                    refused += 1
                    log.warning("laneledger: %s", json.dumps(result))
        except ValueError:
            pass
        with self._lock:
            self.posted += len(batch)
            self.refused += refused


def from_env() -> LaneledgerLogger:
    """A :class:`LaneledgerLogger` configured from LANELEDGER_* environment variables."""
    lanes = os.environ.get("LANELEDGER_LANES")
    return LaneledgerLogger(
        url=os.environ.get("LANELEDGER_URL", ""),
        token=os.environ.get("LANELEDGER_TOKEN", ""),
        idem_key_field=os.environ.get("LANELEDGER_IDEM_KEY_FIELD") or None,
        idem_key_header=os.environ.get("LANELEDGER_IDEM_KEY_HEADER") or None,
        job_id_field=os.environ.get("LANELEDGER_JOB_ID_FIELD") or None,
        lanes=json.loads(lanes) if lanes else None,
    )


_instance: LaneledgerLogger | None = None


def __getattr__(name: str):
    # `callbacks: laneledger_callback.proxy_handler_instance` in the LiteLLM proxy's config.yaml.
    global _instance
    if name == "proxy_handler_instance":
        if _instance is None:
            _instance = from_env()
        return _instance
    raise AttributeError(name)
