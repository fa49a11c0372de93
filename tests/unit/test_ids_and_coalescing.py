import copy

from treadle.core import ids
from treadle.core.ids import IdFactory, is_id, is_token, new_id
from treadle.providers.coalesce import Coalescer


def test_ids_from_one_command_are_deterministic_and_typed():
    a, b = IdFactory("cmd_1", 1_000), IdFactory("cmd_1", 1_000)
    assert [a.next("run"), a.next("msg")] == [b.next("run"), b.next("msg")]
    assert IdFactory("cmd_2", 1_000).next("run") != IdFactory("cmd_1", 1_000).next("run")


def test_ids_sort_by_time_and_are_subject_safe():
    early, late = new_id("thr", 1_000), new_id("thr", 2_000)
    assert early < late and is_token(early) and early.startswith("thr_")


def test_injection_attempts_are_not_tokens():
    for bad in ("a.b", "*", ">", "a b", "", "x" * 65, "thr_1\n"):
        assert not is_token(bad)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_10000_char_reply_in_3000_deltas_makes_at_most_60_durable_events():
    clock = FakeClock()
    coalescer = Coalescer(clock=clock)
    text = "x" * 10_000
    chunks = [text[i : i + 4] for i in range(0, 10_000, 4)] + ["y"] * 500  # 3,000 deltas
    flushed = []
    for chunk in chunks:
        clock.now += 0.004  # 12 s of streaming in total
        if (out := coalescer.add(chunk)) is not None:
            flushed.append(out)
    assert len(flushed) <= 60
    rest = coalescer.flush() or ""
    assert "".join(flushed) + rest == "".join(chunks)


def test_coalescing_flushes_by_size_when_text_arrives_fast():
    clock = FakeClock()
    coalescer = Coalescer(clock=clock)
    flushed = [out for _ in range(3) if (out := coalescer.add("z" * 4096)) is not None]
    assert len(flushed) == 3


def test_a_messages_first_text_is_durable_at_once_and_the_rest_is_coalesced():
    clock = FakeClock()
    coalescer = Coalescer(clock=clock)
    assert coalescer.add("Draft") == "Draft"  # its place in the thread is taken when it begins
    assert coalescer.add("ing") is None
    clock.now += 0.25
    assert coalescer.add(" notes") == "ing notes"


def _crockford(value: int, length: int) -> str:
    """The id format by its definition: ``length`` Crockford base32 digits, most significant first."""
    digits = "0123456789abcdefghjkmnpqrstvwxyz"
    return "".join(digits[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def test_ids_are_the_same_whatever_encodes_them_so_a_replayed_decision_mints_the_same():
    f = IdFactory("cmd_golden", 1764806400123)  # minted by the loop of shifts this encoding replaced
    assert [f.next("run"), f.next("run"), f.next("evt")] == [
        "run_01kbkah63vq40vwd9rg0aqe44n",
        "run_01kbkah63v78fd1fc9h844r2hv",
        "evt_01kbkah63vp2759g0qs6q4q0ch",
    ]
    for ms, entropy in (
        (0, bytes(10)),
        (2**50 - 1, b"\xff" * 10),
        (2**50 + 5, bytes(range(10))),
        (1_000, b"\x80" * 10),
    ):
        body = _crockford(ms, 10) + _crockford(int.from_bytes(entropy, "big"), 16)
        assert ids._mint("x", ms, entropy) == "x_" + body and is_id("x_" + body, "x")


def test_a_copied_id_factory_mints_the_same_ids_again_on_its_own():
    ids = IdFactory("seed", 1_000)
    ids.next("run")
    again = copy.copy(ids)
    assert [again.next("hoff"), again.next("pth")] == [ids.next("hoff"), ids.next("pth")]
    assert again.next("x") == ids.next("x") and again is not ids
