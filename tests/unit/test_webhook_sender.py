"""One outbound POST against a receiver on loopback: sent signed when allow-listed; refused before any
connection without the allow-list, whether the URL names the address or a name that resolves to it (the
check is made at connect time, on the address connected to); a redirect not followed; a stalled receiver
timed out; an oversized answer cut off."""

from __future__ import annotations

import logging

import pytest

from tests.support.receiver import Receiver, answer
from treadle.client.webhooks import verify
from treadle.webhooks.addresses import AllowList
from treadle.webhooks.sender import Limits, post

SECRET = "whsec_sender-test-secret"
LOOPBACK = AllowList.parse(["127.0.0.1/32"])
QUICK = Limits(connect_timeout=2.0, read_timeout=0.5, max_response=1024)


@pytest.fixture
async def receiver():
    r = await Receiver().start()
    yield r
    await r.stop()


async def test_an_allow_listed_receiver_gets_one_signed_post(receiver: Receiver) -> None:
    outcome = await post(receiver.url("/in?x=1"), b'{"a":1}', SECRET, "dlv_1", LOOPBACK, QUICK)
    assert outcome.ok and outcome.status == 200
    (got,) = receiver.requests
    assert got.path == "/in?x=1" and got.body == b'{"a":1}' and got.headers["treadle-delivery"] == "dlv_1"
    verify(SECRET, got.headers["treadle-signature"], got.body)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
async def test_loopback_is_refused_at_connect_time_without_the_allow_list(
    receiver: Receiver, host: str, caplog: pytest.LogCaptureFixture
) -> None:
    # "localhost" is the DNS-rebinding case: a name whose answer is loopback now, whatever it was at registration.
    caplog.set_level(logging.DEBUG)
    outcome = await post(f"http://{host}:{receiver.port}/", b"{}", SECRET, "dlv_1", AllowList(), QUICK)
    assert not outcome.ok and outcome.error is not None and outcome.error.startswith("refused")
    assert receiver.connections == 0
    assert SECRET not in caplog.text and SECRET not in outcome.error


async def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answers = [answer(302, "Found", "Location: http://169.254.169.254/latest/meta-data\r\n")]
    outcome = await post(receiver.url(), b"{}", SECRET, "dlv_1", LOOPBACK, QUICK)
    assert not outcome.ok and outcome.status == 302 and "redirect" in (outcome.error or "")
    assert receiver.connections == 1


async def test_a_receiver_that_does_not_answer_times_out(receiver: Receiver) -> None:
    receiver.stall = True
    outcome = await post(receiver.url(), b"{}", SECRET, "dlv_1", LOOPBACK, QUICK)
    assert not outcome.ok and "no answer" in (outcome.error or "")


async def test_an_oversized_answer_is_cut_off(receiver: Receiver) -> None:
    flood = "".join(f"X-Pad-{i}: {'y' * 100}\r\n" for i in range(100))
    receiver.answers = [answer(200, "OK", flood)]
    outcome = await post(receiver.url(), b"{}", SECRET, "dlv_1", LOOPBACK, QUICK)
    assert not outcome.ok and "cap" in (outcome.error or "")


async def test_an_error_status_is_a_failure_and_nothing_listening_is_one_too(receiver: Receiver) -> None:
    receiver.answers = [answer(500, "Oops")]
    outcome = await post(receiver.url(), b"{}", SECRET, "dlv_1", LOOPBACK, QUICK)
    assert not outcome.ok and outcome.status == 500
    port = receiver.port
    await receiver.stop()
    gone = await post(f"http://127.0.0.1:{port}/", b"{}", SECRET, "dlv_1", LOOPBACK, QUICK)
    assert not gone.ok and gone.status is None and "connect" in (gone.error or "")


async def test_an_answer_whose_connection_stays_open_is_taken_at_its_headers(receiver: Receiver) -> None:
    receiver.answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial"]  # body never finished
    receiver.stall_after_answer = True
    outcome = await post(receiver.url(), b"{}", SECRET, "dlv_1", LOOPBACK, QUICK)
    assert outcome.ok and outcome.status == 200
