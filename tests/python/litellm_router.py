"""Drives a real LiteLLM Router (mock responses, no network) against a running laneledger.

Usage: litellm_router.py MODE URL TOKEN JOB_ID IDEM_KEY
  MODE callback: the shipped LaneledgerLogger (integrations/litellm) posts one attempt per try;
                 the key goes in the request's metadata as `idempotency_key`.
  MODE generic:  LiteLLM's own generic API logger posts its StandardLoggingPayload records as
                 NDJSON to POST /v1/attempts?mapping=litellm&idem_fallback=1; the key goes in the
                 request's metadata as `idempotency_key`, which the payload does not carry.
  MODE generic-keyed: the same, with the key in `metadata.spend_logs_metadata.idempotency_key`,
                 which the payload carries.

The Router has two model groups: `free`, whose one deployment always answers 429 with z.ai's
business code 1305 in the body, and `paid`, which answers "ok". num_retries=2 and a fallback
free -> paid: one request makes three refused tries on free, then one on paid.
Prints one JSON object: the response's id and content, and the sender's counters.
"""

import asyncio
import json
import sys

import litellm
from litellm import Router


class Refused(Exception):
    """What the free deployment raises: LiteLLM maps status 429 to a RateLimitError."""

    status_code = 429


BODY_1305 = '{"error":{"code":"1305","message":"The service may be temporarily overloaded, please try again later"}}'


def router() -> Router:
    return Router(
        model_list=[
            {
                "model_name": "free",
                "litellm_params": {"model": "openai/glm-4.6", "api_key": "sk-free", "mock_response": Refused(BODY_1305)},
            },
            {
                "model_name": "paid",
                "litellm_params": {"model": "openai/glm-4.6-paid", "api_key": "sk-paid", "mock_response": "ok"},
            },
        ],
        num_retries=2,
        retry_after=0,
        fallbacks=[{"free": ["paid"]}],
    )


async def main(mode: str, url: str, token: str, job_id: str, idem_key: str) -> dict:
    litellm.telemetry = False
    if mode == "callback":
        sys.path.insert(0, "integrations/litellm")
        from laneledger_callback import LaneledgerLogger

        logger = LaneledgerLogger(url=url, token=token, idem_key_field="idempotency_key", retries=0)
    elif mode in ("generic", "generic-keyed"):
        from litellm.integrations.generic_api.generic_api_callback import GenericAPILogger

        # Built inside the running loop: its constructor starts the periodic flush task.
        logger = GenericAPILogger(
            endpoint=f"{url}/v1/attempts?mapping=litellm&idem_fallback=1",
            headers={"Authorization": f"Bearer {token}"},
            log_format="ndjson",
            batch_size=100,
            flush_interval=3600,
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    litellm.callbacks = [logger]
    metadata = {"idempotency_key": idem_key}
    if mode == "generic-keyed":
        metadata = {"spend_logs_metadata": {"idempotency_key": idem_key}}
    r = router()
    resp = await r.acompletion(
        model="free",
        messages=[{"role": "user", "content": "hi"}],
        metadata=metadata,
        litellm_trace_id=job_id,
    )
    # The success callback runs after the answer returns: let LiteLLM's logging tasks finish.
    for _ in range(200):
        await asyncio.sleep(0.05)
        if mode == "callback" and logger._queue.unfinished_tasks + logger.posted >= 4:
            break
        if mode != "callback" and len(logger.log_queue) >= 4:
            break
    out = {"response_id": resp.id, "content": resp.choices[0].message.content}
    if mode == "callback":
        out.update(flushed=logger.flush(10), posted=logger.posted, dropped=logger.dropped, refused=logger.refused)
    else:
        out.update(queued=len(logger.log_queue))
        await logger.async_send_batch()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:6]))))
