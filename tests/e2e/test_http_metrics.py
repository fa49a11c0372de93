"""Issue 23, item 4: the gateway counts and times each request by its route template (ids never become label
values) and exports no family of another worker."""

from __future__ import annotations

import httpx


async def test_http_requests_are_counted_and_timed_by_route_and_the_gateway_exports_only_its_families(stack, api):
    thread = await api.create_thread()
    for _ in range(2):
        await api.thread(thread)
    missing = await api.request("GET", "/v1/threads/th_doesnotexist00000000000000")
    assert missing.status_code in (400, 404)
    async with httpx.AsyncClient(base_url=stack.api_url) as client:
        text = (await client.get("/metrics")).text
    samples = [line for line in text.splitlines() if line.startswith("treadle_http_requests_total{")]
    by_thread = [s for s in samples if 'route="/v1/threads/{thread_id:str}"' in s and 'method="GET"' in s]
    assert any('status="200"' in s for s in by_thread) and any(
        f'status="{missing.status_code}"' in s for s in by_thread
    ), samples
    assert thread not in text  # the route template, never the id
    assert "treadle_http_request_duration_seconds_bucket{" in text
    assert "treadle_provider_sessions_live" not in text and "treadle_projection_lag_events" not in text
    assert "treadle_build_info{" in text


async def test_paths_no_route_matches_are_counted_as_unmatched_and_never_become_label_values(stack):
    """A 404 is counted (Litestar's middleware runs only once a route matched: the counter sits around the
    router), under route ``unmatched``; a hostile client sending many made-up paths and methods adds no series."""

    def unmatched(text: str) -> dict[str, float]:
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("treadle_http_requests_total{") and 'route="unmatched"' in line
        }

    async with httpx.AsyncClient(base_url=stack.api_url) as client:
        before = unmatched((await client.get("/metrics")).text)
        made_up = [f"/nope-{i:04d}/{'x' * (i % 7) * 300}" for i in range(300)] + ["/v1/threads/th_x/hostile%22%0a}"]
        for i, path in enumerate(made_up):
            method = ("GET", "POST", "PROPFIND", "MKCOL", "SEARCH")[i % 5]
            assert (await client.request(method, path)).status_code == 404
        text = (await client.get("/metrics")).text
    after = unmatched(text)
    assert "nope-" not in text and "hostile" not in text  # no path became a label value
    labels = {series.split("{", 1)[1] for series in after}
    assert labels <= {f'method="{m}",route="unmatched",status="404"}}' for m in ("GET", "POST", "other")}, (
        labels
    )  # three series at most, whatever was sent
    counted = sum(after.values()) - sum(before.values())
    assert counted == len(made_up), (before, after)
