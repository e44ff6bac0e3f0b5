"""gateway.store across real processes: the data dir lock, and SIGKILL in the middle of writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.store import Store, StoreLocked

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

TRY_OPEN = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gateway.store import Store, StoreLocked
    try:
        Store.open(Path(sys.argv[1]))
    except StoreLocked as exc:
        print(exc)
        sys.exit(3)
    """
)

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gateway.store import Store
    store = Store.open(Path(sys.argv[1]))
    print("ready", flush=True)
    time.sleep(60)
    """
)

# Round 0 adds FIRST messages (every even one to a second queue too) and commits. Each later
# round adds ROUND more to q1 and removes from q1 those of the previous round divisible by 3,
# then commits. A line "committed <round>" follows every commit.
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import trio
    from gateway.store import Store
    from gateway.wire.content import Content

    HEADER = b"\\x10\\x00\\x02"  # delivery-mode 2
    FIRST, ROUND = int(sys.argv[2]), int(sys.argv[3])

    async def main() -> None:
        store = Store.open(Path(sys.argv[1]))
        for n in range(1, FIRST + 1):
            for queue in ("q1", "q2") if n % 2 == 0 else ("q1",):
                store.add_message("/", queue, n, "ex", "rk", Content(HEADER, b"body %d" % n), 1.0)
        print("ticket", await store.commit(), flush=True)
        round = 0
        while True:
            round += 1
            start = FIRST + (round - 1) * ROUND
            for n in range(start + 1, start + ROUND + 1):
                store.add_message("/", "q1", n, "ex", "rk", Content(HEADER, b"body %d" % n), 1.0)
            if round > 1:
                for n in range(start - ROUND + 1, start + 1):
                    if n % 3 == 0:
                        store.remove_message("/", "q1", n)
            await store.commit()
            print("committed", round, flush=True)

    trio.run(main)
    """
)
FIRST, ROUND = 2000, 300


def expected_after(rounds: int) -> dict[tuple[str, str], list[int]]:
    """The queues' contents once `rounds` rounds after the first commit are durable."""
    q1 = list(range(1, FIRST + 1))
    for r in range(1, rounds + 1):
        start = FIRST + (r - 1) * ROUND
        q1 += range(start + 1, start + ROUND + 1)
    removed = {n for n in range(FIRST + 1, FIRST + max(rounds - 1, 0) * ROUND + 1) if n % 3 == 0}
    return {
        ("/", "q1"): [n for n in q1 if n not in removed],
        ("/", "q2"): list(range(2, FIRST + 1, 2)),
    }


def test_lock_is_held_against_another_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "node data"
    with Store.open(data_dir):
        child = subprocess.run(
            [sys.executable, "-c", TRY_OPEN, str(data_dir)],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert child.returncode == 3, child.stderr
        assert str(data_dir) in child.stdout
        assert f"pid {os.getpid()}" in child.stdout
    again = subprocess.run(
        [sys.executable, "-c", TRY_OPEN, str(data_dir)],
        env=ENV,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr


def test_lock_of_a_killed_process_is_released(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        with pytest.raises(StoreLocked, match=f"pid {holder.pid}"):
            Store.open(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    Store.open(tmp_path).close()


def test_sigkill_mid_write_keeps_every_committed_message_exactly_once(tmp_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), str(FIRST), str(ROUND)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stderr is not None
    try:
        assert writer.stdout.readline().split() == ["ticket", "1"], writer.stderr.read()
        for _ in range(5):
            assert writer.stdout.readline().startswith("committed"), writer.stderr.read()
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    # Lines already in the pipe tell how far the writer really got before the signal.
    last_round = 5
    for line in writer.stdout.read().splitlines():
        last_round = int(line.split()[1])

    with Store.open(tmp_path) as store:
        snapshot = store.load()
    found = {key: [r.message_id for r in records] for key, records in snapshot.messages.items()}
    # The round in flight at the kill is either wholly there or wholly absent.
    assert found in (expected_after(last_round), expected_after(last_round + 1))
    for records in snapshot.messages.values():
        for record in records:
            assert record.content.persistent and not record.redelivered
            assert record.content.body == b"body %d" % record.message_id
            assert (record.exchange, record.routing_key) == ("ex", "rk")
    assert snapshot.next_message_id > FIRST
