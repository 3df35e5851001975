"""The segment log on real files: layout, rollover, state slots, and every repair the opener makes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from hoarddb.errors import ClosedError, CorruptDataError
from hoarddb.storage import framing
import hoarddb.storage.segment as segment_module
from hoarddb.storage.segment import SEGMENT_HEADER_SIZE, SEGMENT_MAGIC, SLOT_SIZE, STATE_FILE, SegmentLog, \
    segment_name, verify
import hoarddb.storage.segment_format as segment_format
from hoarddb.storage.segment_format import _parse_slot
from hoarddb.values.codec import decode, encode

from ..killing import SAY_READY, kill_midway, run_script

SMALL = 4096
#: The identity every segment file begins with (a file written before identities has none).
HDR = SEGMENT_HEADER_SIZE


def payload(i: int, pad: int = 0) -> bytes:
    return encode({"i": i, "pad": "x" * pad})


def ids(payloads: list[bytes]) -> list[int]:
    return [decode(p)["i"] for p in payloads]


def seg_files(directory: Path, suffix: str = "fifo") -> list[str]:
    return sorted(p.name for p in directory.glob(f"seg_*.{suffix}"))


def slots(directory: Path) -> list[dict | None]:
    raw = (directory / STATE_FILE).read_bytes()
    return [_parse_slot(raw[i * SLOT_SIZE:(i + 1) * SLOT_SIZE]) for i in range(2)]


def everything(log: SegmentLog) -> list[int]:
    return ids(log.read_range(0, len(log) + 1))


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    directory = tmp_path / "Comments"
    directory.mkdir()
    return directory


def open_log(directory: Path, suffix: str = "fifo", size: int = SMALL, sync: bool = True,
             preallocate: int | None = None) -> SegmentLog:
    return SegmentLog(directory, suffix, size, sync=sync, preallocate=preallocate)


def abandon(log: SegmentLog) -> None:
    """Leave the log as a killed process would: its files closed without a clean close, so
    that the next open repairs what a crash leaves (a log closed cleanly refuses it)."""
    log._closed = True
    log._close_files()


def entries_start(path: Path) -> int:
    """Where the entries of a segment file start: after its identity, if it begins with one."""
    with open(path, "rb") as f:
        return HDR if f.read(len(SEGMENT_MAGIC)) == SEGMENT_MAGIC else 0


def data_end(path: Path) -> int:
    """Where the whole entries of a segment file end (zeros may follow: preallocation)."""
    with open(path, "rb") as f:
        return framing.valid_end(f, entries_start(path))


# -- layout --------------------------------------------------------------------------------


def test_a_new_log_has_only_its_state_file_of_two_slots(bucket):
    log = open_log(bucket)
    assert os.listdir(bucket) == [STATE_FILE]
    assert (bucket / STATE_FILE).stat().st_size == 2 * SLOT_SIZE
    first, second = slots(bucket)
    assert first["seq"] == 0 and first["head_segment"] == 1 and first["head_offset"] == 0
    assert second is None
    log.close()


def test_entries_are_framed_bson_in_numbered_segments(bucket):
    log = open_log(bucket, size=64 * 1024)
    log.append([payload(1), payload(2)])
    assert seg_files(bucket) == ["seg_00001.fifo"]
    with open(bucket / "seg_00001.fifo", "rb") as f:
        assert f.read(HDR)[:8] == b"hoardseg"  # the log's identity (segment.segment_header), then the entries
        assert ids([p for _, p in framing.scan(f, HDR)]) == [1, 2]
    assert segment_name(12, "lifo") == "seg_00012.lifo"
    log.close()


def test_a_segment_never_crosses_its_size_and_a_big_entry_goes_alone(bucket):
    log = open_log(bucket)
    entry = len(framing.frame(payload(0, 900)))
    log.append([payload(i, 900) for i in range(10)])  # one write, spread over segments
    per_segment = SMALL // entry
    assert len(seg_files(bucket)) == -(-10 // per_segment)
    for name in seg_files(bucket):
        assert (bucket / name).stat().st_size <= SMALL
    log.append([payload(10, 10_000), payload(11)])
    names = seg_files(bucket)
    assert (bucket / names[-2]).stat().st_size == HDR + len(framing.frame(payload(10, 10_000)))
    assert data_end(bucket / names[-1]) == HDR + len(framing.frame(payload(11)))
    assert (bucket / names[-1]).stat().st_size == SMALL  # zeros up to the segment's size (preallocation)
    assert everything(log) == list(range(12))
    log.close()
    log = open_log(bucket)
    assert everything(log) == list(range(12)) and len(log) == 12
    log.close()


def test_read_range_pages_across_segments(bucket):
    log = open_log(bucket)
    log.append([payload(i, 300) for i in range(60)])
    log.take_head(7)
    assert ids(log.read_range(0, 5)) == [7, 8, 9, 10, 11]
    assert ids(log.read_range(20, 15)) == list(range(27, 42))
    assert ids(log.read_range(50, 100)) == list(range(57, 60))
    assert log.read_range(53, 10) == []
    log.close()


def test_a_closed_log_refuses_calls(bucket):
    log = open_log(bucket)
    log.close()
    log.close()
    with pytest.raises(ClosedError):
        log.append([payload(1)])
    with pytest.raises(ClosedError):
        log.read_head(1)


# -- fifo: head pointer, state slots, unlinking ------------------------------------------------


def test_state_updates_alternate_slots(bucket):
    log = open_log(bucket)
    log.append([payload(i) for i in range(5)])
    log.take_head(1)
    first, second = slots(bucket)
    assert first["seq"] == 0 and second["seq"] == 1 and second["popped"] == 1
    log.take_head(2)  # one state write for two entries
    first, second = slots(bucket)
    assert first["seq"] == 2 and first["popped"] == 3 and second["seq"] == 1
    log.close()


def test_segments_the_head_left_are_unlinked(bucket):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(12)])
    before = seg_files(bucket)
    assert len(before) == 3
    assert ids(log.take_head(5)) == [0, 1, 2, 3, 4]
    assert seg_files(bucket) == before[1:]
    log.close()
    log = open_log(bucket)
    assert everything(log) == list(range(5, 12)) and log.popped == 5
    log.close()


def test_an_emptied_queue_keeps_no_big_segment_and_numbering_goes_on(bucket):
    log = open_log(bucket)
    log.append([payload(i) for i in range(3)])  # a small segment stays for the next pushes
    log.take_head(3)
    assert seg_files(bucket) == ["seg_00001.fifo"]
    log.append([payload(i, 900) for i in range(3, 6)])
    log.take_head(3)
    assert seg_files(bucket) == []
    log.close()
    log = open_log(bucket)
    assert len(log) == 0
    log.append([payload(9)])
    assert seg_files(bucket) == ["seg_00002.fifo"]
    assert ids(log.take_head(1)) == [9]
    log.close()


def test_a_segment_left_by_a_crash_before_its_unlink_is_removed_on_open(bucket, caplog):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(8)])
    first = bucket / "seg_00001.fifo"
    saved = first.read_bytes()
    log.take_head(4)
    log.close()
    assert not first.exists()
    first.write_bytes(saved)  # as if killed between the state write and the unlink
    log = open_log(bucket)
    assert not first.exists()
    assert everything(log) == [4, 5, 6, 7]
    log.close()


def test_a_corrupt_newest_slot_falls_back_to_the_other(bucket, caplog):
    log = open_log(bucket)
    log.append([payload(i) for i in range(5)])
    log.take_head(1)  # seq 1, slot 1
    log.take_head(1)  # seq 2, slot 0
    abandon(log)  # (a clean close would write seq 3)
    with open(bucket / STATE_FILE, "r+b") as f:  # flip a byte inside slot 0's BSON
        f.seek(20)
        b = f.read(1)
        f.seek(20)
        f.write(bytes([b[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket)
    assert "slot 0 does not check" in caplog.text
    assert everything(log) == [1, 2, 3, 4]  # the state before the update that was lost
    log.take_head(1)  # the next update goes over the bad slot, not the good one
    first, second = slots(bucket)
    assert first["seq"] == 2 and second["seq"] == 1
    log.close()
    assert everything(open_log(bucket)) == [2, 3, 4]


def test_a_corrupt_older_slot_changes_nothing(bucket):
    log = open_log(bucket)
    log.append([payload(i) for i in range(5)])
    log.take_head(1)
    log.take_head(1)  # newest is slot 0
    abandon(log)  # (a clean close would write the newest into slot 1)
    with open(bucket / STATE_FILE, "r+b") as f:
        f.seek(SLOT_SIZE + 10)
        f.write(b"\xAA\xBB")
    log = open_log(bucket)
    assert everything(log) == [2, 3, 4]
    log.close()


def test_no_valid_slot_with_segments_is_refused(bucket):
    log = open_log(bucket)
    log.append([payload(1)])
    log.close()
    (bucket / STATE_FILE).write_bytes(b"\x07" * 2 * SLOT_SIZE)
    with pytest.raises(CorruptDataError, match="no valid slot"):
        open_log(bucket)
    (bucket / STATE_FILE).unlink()
    with pytest.raises(CorruptDataError, match="missing"):
        open_log(bucket)


def test_a_state_file_torn_while_being_created_is_made_again(bucket):
    (bucket / STATE_FILE).write_bytes(b"\0" * 100)
    log = open_log(bucket)
    log.append([payload(1)])
    assert ids(log.take_head(1)) == [1]
    log.close()


# -- torn tails -------------------------------------------------------------------------------


@pytest.mark.parametrize("preallocate", [0, None], ids=["file without zeros", "preallocated file"])
@pytest.mark.parametrize("damage", ["cut inside an entry", "garbage appended", "torn header"])
def test_a_torn_tail_is_cut_back_to_the_last_whole_entry(bucket, caplog, damage, preallocate):
    log = open_log(bucket, size=1 << 20, preallocate=preallocate)
    for i in range(5):  # five appends: five batches of one
        log.append([payload(i, 50)])
    abandon(log)
    path = bucket / "seg_00001.fifo"
    whole = data_end(path)
    assert (path.stat().st_size > whole) == (preallocate is None)
    entry = len(framing.frame(payload(0, 50)))
    # Without zeros the damage is where the file ends; with them, where the data ends (an
    # append that lands on the zeros and is torn).
    if damage == "cut inside an entry":
        if preallocate == 0:
            os.truncate(path, whole - entry // 2)
        else:  # the last entry's second half never reached the disk: zeros there
            with open(path, "r+b") as f:
                f.seek(whole - entry // 2)
                f.write(bytes(entry // 2))
        kept = 4
    elif damage == "garbage appended":
        with open(path, "r+b") as f:
            f.seek(whole)
            f.write(framing.frame(payload(5, 50))[:-3] + b"\xde\xad\xbe")
        kept = 5
    else:
        with open(path, "r+b") as f:
            f.seek(whole)
            f.write(framing.frame(payload(5, 50))[:5])
        kept = 5
    cut = path.stat().st_size - HDR - kept * entry  # the zeros after a torn append go with it
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, size=1 << 20, preallocate=preallocate)
    assert everything(log) == list(range(kept))
    assert path.stat().st_size == HDR + kept * entry
    assert f"cut {cut} bytes of torn tail from seg_00001.fifo" in caplog.text
    log.append([payload(99)])  # appends go after the last whole entry
    log.close()
    assert everything(open_log(bucket, size=1 << 20)) == [*range(kept), 99]


def test_zeros_after_the_last_entry_are_kept_as_preallocated_space(bucket, caplog):
    log = open_log(bucket, size=1 << 20, preallocate=0)  # a file as hoardDB wrote them before preallocation
    for i in range(5):
        log.append([payload(i, 50)])
    log.close()
    path = bucket / "seg_00001.fifo"
    whole = path.stat().st_size
    with open(path, "ab") as f:  # zeros after the entries: preallocation, or an append of which no byte landed
        f.write(b"\0" * 4096)
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, size=1 << 20)
    assert caplog.text == ""
    assert everything(log) == list(range(5))
    assert path.stat().st_size == whole + 4096
    log.append([payload(99)])  # lands on the zeros: the file does not grow
    assert path.stat().st_size == whole + 4096
    assert data_end(path) == whole + len(framing.frame(payload(99)))
    log.close()
    assert everything(open_log(bucket, size=1 << 20)) == [*range(5), 99]


def test_a_damaged_segment_before_the_last_is_refused_not_cut(bucket):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(8)])
    log.close()
    with open(bucket / "seg_00001.fifo", "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    with pytest.raises(CorruptDataError, match="seg_00001.fifo"):
        open_log(bucket)


def test_damage_found_while_reading_is_an_error_not_a_document(bucket):
    log = open_log(bucket)
    log.append([payload(i, 100) for i in range(3)])
    with open(bucket / "seg_00001.fifo", "r+b") as f:
        f.seek(HDR + 30)
        f.write(b"\x00\x01")
    with pytest.raises(CorruptDataError, match="checksum"):
        log.read_head(3)
    with pytest.raises(CorruptDataError):
        log.take_head(1)
    assert len(log) == 3  # nothing was taken
    log.close()


# -- lifo: truncation, unlink, cut ------------------------------------------------------------


def test_a_lifo_pop_truncates_the_last_segment(bucket):
    log = open_log(bucket, "lifo", size=1 << 20)
    log.append([payload(i) for i in range(5)])
    size = (bucket / "seg_00001.lifo").stat().st_size
    entry = len(framing.frame(payload(0)))
    assert ids(log.take_tail(2)) == [4, 3]
    assert (bucket / "seg_00001.lifo").stat().st_size == size - 2 * entry
    assert slots(bucket)[1] is None  # no state write
    log.close()
    log = open_log(bucket, "lifo", size=1 << 20)
    assert ids(log.read_tail(10)) == [2, 1, 0]
    log.close()


def test_a_lifo_pop_that_empties_the_last_segment_unlinks_it(bucket):
    log = open_log(bucket, "lifo")
    log.append([payload(i, 900) for i in range(8)])  # 4 + 4
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo", "seg_00002.lifo"]
    assert ids(log.take_tail(4)) == [7, 6, 5, 4]
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo"]
    assert ids(log.take_tail(1)) == [3]  # the previous segment was scanned for its offsets
    log.close()


def test_a_lifo_pop_over_several_segments_commits_a_cut(bucket):
    log = open_log(bucket, "lifo")
    log.append([payload(i, 900) for i in range(10)])  # 4 + 4 + 2
    assert ids(log.take_tail(7)) == [9, 8, 7, 6, 5, 4, 3]
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo"]
    state = max(filter(None, slots(bucket)), key=lambda s: s["seq"])
    assert (state["cut_segment"], state["cut_above"]) == (1, 3)
    log.append([payload(20, 900), payload(21, 900)])  # new segments are numbered above the cut
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo", "seg_00004.lifo"]
    log.close()
    log = open_log(bucket, "lifo")
    assert everything(log) == [0, 1, 2, 20, 21]
    assert ids(log.take_tail(5)) == [21, 20, 2, 1, 0]
    assert (bucket / "seg_00001.lifo").stat().st_size == HDR  # emptied: its identity stays
    log.close()


def test_a_cut_interrupted_by_a_crash_is_finished_on_open(bucket, caplog):
    log = open_log(bucket, "lifo")
    log.append([payload(i, 900) for i in range(10)])
    saved = {name: (bucket / name).read_bytes() for name in seg_files(bucket, "lifo")}
    log.take_tail(7)
    abandon(log)
    for name, data in saved.items():  # as if killed right after the cut's state write
        (bucket / name).write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, "lifo")
    assert "finishing an interrupted pop" in caplog.text
    assert everything(log) == [0, 1, 2]
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo"]
    log.close()


def test_sync_off_still_works(bucket):
    log = open_log(bucket, "lifo", sync=False)
    log.append([payload(i, 900) for i in range(10)])
    assert ids(log.take_tail(7)) == [9, 8, 7, 6, 5, 4, 3]
    log.close()
    assert everything(open_log(bucket, "lifo", sync=False)) == [0, 1, 2]


# -- a write the operating system refuses ---------------------------------------------------------

FULL_DISK = r"""
import resource, signal, sys
from pathlib import Path
from hoarddb.errors import StorageError
from hoarddb.storage.segment import SegmentLog
from hoarddb.values.codec import encode

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # let the write fail with EFBIG instead
log = SegmentLog(Path(sys.argv[1]), "fifo", 1 << 20)
log.append([encode({"i": 0})])
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))  # the file may not grow past 20000 bytes
try:
    log.append([encode({"i": k, "pad": "x" * 3000}) for k in range(1, 11)])
except StorageError as exc:
    print("refused:", exc)
log.append([encode({"i": 11})])
print("length", len(log))
"""


def test_a_write_the_disk_refuses_leaves_nothing_and_the_log_goes_on(bucket):
    result = run_script(FULL_DISK, bucket)
    assert result.returncode == 0, result.stderr
    assert "refused: writing" in result.stdout and "nothing of this write was kept" in result.stdout
    assert "length 2" in result.stdout
    log = open_log(bucket, size=1 << 20)
    assert everything(log) == [0, 11]
    log.close()


# -- batches are all or nothing ----------------------------------------------------------------


@pytest.mark.parametrize("preallocate", [0, None], ids=["file without zeros", "preallocated file"])
def test_a_batch_torn_by_a_crash_leaves_none_of_it(bucket, preallocate):
    log = open_log(bucket, size=1 << 20, preallocate=preallocate)
    log.append([payload(0, 50)])
    log.append([payload(i, 50) for i in range(1, 6)])
    abandon(log)
    path = bucket / "seg_00001.fifo"
    entry = len(framing.frame(payload(0, 50)))
    end = data_end(path)
    with open(path, "r+b") as f:  # the batch's last entry never made it (zeros where it was to be)
        f.seek(end - entry // 2)
        f.write(bytes(entry // 2))
    if preallocate == 0:
        os.truncate(path, end - entry // 2)
    log = open_log(bucket, size=1 << 20, preallocate=preallocate)
    assert everything(log) == [0]
    assert path.stat().st_size == HDR + entry
    log.close()


def test_a_torn_batch_that_spanned_segments_is_cut_in_both(bucket, caplog):
    size = 4096
    log = open_log(bucket, size=size)
    log.append([payload(0, 50)])
    log.append([payload(i, 1000) for i in range(1, 9)])  # spans two or three segments
    abandon(log)
    segs = sorted(p for p in bucket.iterdir() if p.name.startswith("seg_"))
    assert len(segs) >= 2
    for p in segs[1:]:
        os.truncate(p, 0)  # the later segments' writes were lost: a power cut with sync off
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, size=size, sync=False)
    assert everything(log) == [0]
    assert "did not finish" in caplog.text
    log.append([payload(9, 50)])
    assert everything(log) == [0, 9]
    log.close()


def test_a_lifo_pop_inside_a_batch_keeps_the_rest_after_reopen(bucket):
    log = open_log(bucket, "lifo", size=1 << 20)
    log.append([payload(i, 50) for i in range(5)])
    assert ids(log.take_tail(2)) == [4, 3]
    log.close()
    log = open_log(bucket, "lifo", size=1 << 20)
    assert everything(log) == [0, 1, 2]
    log.close()


def test_a_lifo_pop_emptying_the_last_segment_of_a_spanning_batch_keeps_the_rest(bucket):
    size = 4096
    log = open_log(bucket, "lifo", size=size)
    log.append([payload(i, 1000) for i in range(6)])  # two segments or more, one batch
    assert log.segments >= 2
    while log.segments > 1:
        log.take_tail(1)
    left = everything(log)
    log.close()
    log = open_log(bucket, "lifo", size=size)
    assert everything(log) == left and left
    log.close()


# -- preallocation: zeros after the last segment's entries ---------------------------------------


def zeros_after_data(path: Path) -> bool:
    raw = path.read_bytes()
    return raw[data_end(path):].count(0) == len(raw) - data_end(path)


def test_a_fifo_append_preallocates_zeros_and_the_next_appends_land_on_them(bucket, caplog):
    log = open_log(bucket, size=64 * 1024, preallocate=8192)
    log.append([payload(0, 100)])
    path = bucket / "seg_00001.fifo"
    entry = len(framing.frame(payload(0, 100)))
    assert path.stat().st_size == HDR + entry + 8192 and data_end(path) == HDR + entry and zeros_after_data(path)
    for i in range(1, 8192 // entry + 1):  # these fit in the zeros: the file keeps its size
        log.append([payload(i, 100)])
        assert path.stat().st_size == HDR + entry + 8192
    log.append([payload(99, 100)])  # this one runs past the end: zeros again after it
    assert path.stat().st_size == data_end(path) + 8192 and zeros_after_data(path)
    count = len(log)
    log.close()
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, size=64 * 1024, preallocate=8192)
    assert caplog.text == ""  # the zeros are no torn tail
    assert len(log) == count and path.stat().st_size == data_end(path) + 8192
    log.close()


def test_preallocation_never_runs_past_the_segment_size(bucket):
    log = open_log(bucket, size=SMALL)  # the default, 1 MiB, is more than a segment
    log.append([payload(0)])
    assert (bucket / "seg_00001.fifo").stat().st_size == SMALL
    log.append([payload(1, 3 * SMALL)])  # bigger than a segment: alone, no zeros
    assert (bucket / "seg_00002.fifo").stat().st_size == HDR + len(framing.frame(payload(1, 3 * SMALL)))
    log.close()


def test_a_segment_followed_by_another_keeps_no_zeros(bucket):
    size = 16 * 1024
    log = open_log(bucket, size=size, preallocate=4096)
    for i in range(40):
        log.append([payload(i, 700)])
    log.append([payload(i, 700) for i in range(40, 80)])  # a batch over several segments
    names = seg_files(bucket)
    assert len(names) >= 4
    for name in names[:-1]:  # the zeros went before the next segment was created
        assert (bucket / name).stat().st_size == data_end(bucket / name) <= size
    assert (bucket / names[-1]).stat().st_size > data_end(bucket / names[-1])
    log.close()
    log = open_log(bucket, size=size, preallocate=4096)
    assert everything(log) == list(range(80))
    log.close()


def test_zeros_in_a_segment_before_the_last_are_damage(bucket):
    log = open_log(bucket, size=16 * 1024, preallocate=4096)
    log.append([payload(i, 700) for i in range(40)])
    log.close()
    with open(bucket / "seg_00001.fifo", "ab") as f:
        f.write(bytes(4096))
    with pytest.raises(CorruptDataError, match="seg_00001.fifo"):
        open_log(bucket, size=16 * 1024)


def test_a_lifo_log_does_not_preallocate(bucket):
    log = open_log(bucket, "lifo", size=1 << 20)
    log.append([payload(i) for i in range(3)])
    path = bucket / "seg_00001.lifo"
    assert path.stat().st_size == data_end(path)
    log.close()


def test_a_log_written_before_preallocation_opens_and_preallocates_from_then_on(bucket, caplog):
    log = open_log(bucket, size=1 << 20, preallocate=0)  # the old layout: the file ends with its data
    log.append([payload(i, 50) for i in range(5)])
    log.close()
    path = bucket / "seg_00001.fifo"
    old = path.stat().st_size
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, size=1 << 20, preallocate=4096)
    assert caplog.text == "" and path.stat().st_size == old
    log.append([payload(5, 50)])
    assert data_end(path) == old + len(framing.frame(payload(5, 50)))
    assert path.stat().st_size == data_end(path) + 4096
    log.close()
    assert everything(open_log(bucket, size=1 << 20)) == list(range(6))


def test_a_fifo_pop_and_a_lifo_pop_of_a_preallocated_segment(bucket):
    log = open_log(bucket, size=1 << 20, preallocate=4096)
    log.append([payload(i, 50) for i in range(6)])
    assert ids(log.take_head(2)) == [0, 1]
    log.close()
    assert everything(open_log(bucket, size=1 << 20)) == [2, 3, 4, 5]
    # A lifo log opening a file with zeros keeps them until its pop truncates.
    lifo = bucket.parent / "Stack"
    lifo.mkdir()
    log = open_log(lifo, "lifo", size=1 << 20, preallocate=4096)
    log.append([payload(i, 50) for i in range(6)])
    path = lifo / "seg_00001.lifo"
    assert path.stat().st_size > data_end(path)
    log.close()
    log = open_log(lifo, "lifo", size=1 << 20)
    assert ids(log.take_tail(2)) == [5, 4]
    assert path.stat().st_size == data_end(path)
    log.append([payload(9, 50)])  # no preallocation by a lifo log
    assert path.stat().st_size == data_end(path)
    log.close()
    assert everything(open_log(lifo, "lifo", size=1 << 20)) == [0, 1, 2, 3, 9]


PAD_REFUSED = r"""
import resource, signal, sys
from pathlib import Path
from hoarddb.storage.segment import SegmentLog
from hoarddb.values.codec import encode

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))  # room for entries, not for the zeros
log = SegmentLog(Path(sys.argv[1]), "fifo", 1 << 20, preallocate=1 << 20)
log.append([encode({"i": 0})])
log.append([encode({"i": 1})])
print("length", len(log))
"""


def test_zeros_the_disk_refuses_leave_the_entries_standing(bucket):
    result = run_script(PAD_REFUSED, bucket)
    assert result.returncode == 0, result.stderr
    assert "length 2" in result.stdout
    path = bucket / "seg_00001.fifo"
    assert path.stat().st_size == data_end(path)
    assert everything(open_log(bucket, size=1 << 20)) == [0, 1]


#: A child appending to a preallocated log (and popping its head) until it is killed; it
#: says "B ..." before each call and "A ..." once the call returned.
KILLED_APPENDER = r"""
import random, sys
from pathlib import Path
from hoarddb.storage.segment import SegmentLog
from hoarddb.values.codec import encode

directory, start, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
log = SegmentLog(directory, "fifo", 64 * 1024, preallocate=8192)
rng = random.Random(seed)

""" + SAY_READY + r"""
i = start
while True:
    r = rng.random()
    if r < 0.9:
        batch = list(range(i, i + (1 if r < 0.6 else rng.randrange(2, 20))))
        say("B append " + " ".join(map(str, batch)))
        log.append([encode({"i": j, "pad": "x" * rng.randrange(0, 3000)}) for j in batch])
        say("A")
        i += len(batch)
    else:
        n = rng.randrange(1, 30)
        say(f"B take {n}")
        got = log.take_head(n)
        say("A " + str(len(got)))
"""


@pytest.mark.parametrize("rounds", [8 if os.environ.get("HOARDDB_SLOW") != "1" else 80])
def test_a_preallocated_log_killed_mid_append_reopens_with_every_acknowledged_entry(tmp_path, rounds):
    import random

    directory = tmp_path / "Queue"
    directory.mkdir()
    rng = random.Random(7)
    model: list[int] = []
    next_id = 0
    for round_ in range(rounds):
        said = kill_midway(KILLED_APPENDER, [directory, next_id, rng.randrange(2**32)],
                           tmp_path / f"round{round_}.out", rng.uniform(0.02, 0.3))
        in_flight = None
        for line in said:  # only whole lines were said
            words = line.split()
            if words[0] == "B":
                in_flight = words[1:]
                if in_flight[0] == "append":
                    next_id = int(in_flight[-1]) + 1
                continue
            if in_flight[0] == "append":
                model.extend(int(w) for w in in_flight[1:])
            else:
                del model[:int(words[1])]
            in_flight = None

        log = open_log(directory, size=64 * 1024, preallocate=8192)
        try:
            actual = everything(log)
            assert len(log) == len(actual)
        finally:
            log.close()
        allowed = [model]
        if in_flight and in_flight[0] == "append":  # all of it or none
            allowed.append(model + [int(w) for w in in_flight[1:]])
        elif in_flight:  # one state write takes them all, or none
            allowed.append(model[int(in_flight[1]):])
        assert actual in allowed, f"round {round_}: {actual[-10:]} (of {len(actual)}), in flight {in_flight}"
        names = seg_files(directory)
        for name in names[:-1]:
            assert (directory / name).stat().st_size == data_end(directory / name), name
        if names:
            assert zeros_after_data(directory / names[-1])
        model = actual
    assert next_id > 50, "the child appended too little to test anything"


def test_a_power_cut_in_the_first_group_after_a_clean_close_is_repaired_not_refused(bucket, monkeypatch):
    """With sync off (a server), a pop and a push after an open run unflushed, and a flush
    puts the segments on disk before the state. The pop's state write is the first after
    the clean close: unless it is on disk before anything else is, a power cut can leave
    the clean close's counts beside a longer segment, which the opener refuses as damage.

    The disk is simulated: the state file as its last fdatasync left it, the segment
    files as written (the kernel may have written them back at any moment)."""
    import hoarddb.storage.segment_format as segment_format

    durable: dict[str, bytes] = {}
    real = segment_format.datasync

    def datasync(fd: int) -> None:
        real(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(STATE_FILE):
            with open(path, "rb") as f:
                durable[path] = f.read()

    monkeypatch.setattr(segment_format, "datasync", datasync)
    log = open_log(bucket, sync=False, preallocate=SMALL)
    log.append([payload(i) for i in range(5)])
    log.close()  # clean: the counts are recorded (and flushed)

    log = open_log(bucket, sync=False, preallocate=SMALL)
    assert ids(log.take_head(1)) == [0]
    log.append([payload(5)])
    abandon(log)  # the power goes before the group's flush
    state = bucket / STATE_FILE
    state.write_bytes(durable[str(state)])

    log = open_log(bucket, sync=False, preallocate=SMALL)  # a crash, repaired: not CORRUPT_DATA
    try:
        assert everything(log) == [1, 2, 3, 4, 5]
    finally:
        log.close()


# -- a clean close writes its state twice; every segment carries the log's identity -------------


def flip_slot(directory: Path, slot: int) -> None:
    """Damage one state slot: a byte inside its BSON."""
    with open(directory / STATE_FILE, "r+b") as f:
        f.seek(slot * SLOT_SIZE + 20)
        b = f.read(1)
        f.seek(slot * SLOT_SIZE + 20)
        f.write(bytes([b[0] ^ 0xFF]))


def newest_slot(directory: Path) -> int:
    return max((s["seq"], i) for i, s in enumerate(slots(directory)) if s is not None)[1]


def test_a_clean_close_writes_its_state_into_both_slots(bucket):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(10)])
    log.take_head(3)
    log.close()
    first, second = slots(bucket)
    assert first["closed"] == second["closed"]
    assert (first["closed"]["entries"], first["closed"]["segments"], first["closed"]["last"]) == (7, 3, 3)
    assert abs(first["seq"] - second["seq"]) == 1
    for key in ("head_segment", "head_offset", "popped", "queue", "tagged_from"):
        assert first[key] == second[key], key


@pytest.mark.parametrize("which", ["newest", "older"])
def test_a_damaged_slot_after_a_clean_close_is_whole_in_the_other_and_written_again(bucket, caplog, which):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(10)])
    log.take_head(3)
    log.close()
    damaged = newest_slot(bucket) if which == "newest" else 1 - newest_slot(bucket)
    flip_slot(bucket, damaged)
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket)
    assert f"slot {damaged} does not check (damaged)" in caplog.text
    assert "whole state of the last clean close" in caplog.text
    assert everything(log) == list(range(3, 10)) and log.popped == 3
    assert all(s is not None and "closed" in s for s in slots(bucket))  # written again: both whole
    log.close()


def test_a_damaged_newest_slot_after_a_clean_close_keeps_the_close_s_checks(bucket):
    """The clean close's counts survive in the other slot, so a lost last segment is still
    refused (with one copy only, the opener fell back to the update before the close, took
    the log for one after a crash, and opened it without the lost entries)."""
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(10)])
    log.take_head(3)
    log.close()
    flip_slot(bucket, newest_slot(bucket))
    (bucket / "seg_00003.fifo").unlink()
    with pytest.raises(CorruptDataError, match="closed cleanly"):
        open_log(bucket)


def twin_logs(tmp_path: Path, suffix: str = "fifo") -> tuple[Path, Path]:
    """Two logs whose segments hold entries of exactly the same sizes (different values), closed."""
    out = []
    for name, base in (("A", 0), ("B", 1000)):
        directory = tmp_path / name
        directory.mkdir()
        log = open_log(directory, suffix)
        log.append([payload(base + i, 900) for i in range(10)])  # 4 + 4 + 2
        log.close()
        out.append(directory)
    return out[0], out[1]


@pytest.mark.parametrize("crash", [False, True], ids=["after a clean close", "after a crash"])
@pytest.mark.parametrize("suffix", ["fifo", "lifo"])
@pytest.mark.parametrize("name", ["seg_00002", "seg_00003"], ids=["middle segment", "last segment"])
def test_a_segment_of_another_log_with_the_same_sizes_is_refused(tmp_path, name, suffix, crash):
    a, b = twin_logs(tmp_path, suffix)
    if crash:  # the next open repairs what a crash leaves, and still refuses this
        log = open_log(a, suffix)
        log.append([payload(50, 900)])
        log.take_tail(1) if suffix == "lifo" else None
        abandon(log)
    file = f"{name}.{suffix}"
    assert (a / file).stat().st_size == (b / file).stat().st_size
    (a / file).write_bytes((b / file).read_bytes())
    with pytest.raises(CorruptDataError, match=f"{file}: this file belongs to another queue") as caught:
        open_log(a, suffix)
    assert "Restore the bucket" in caught.value.message
    assert (a / file).read_bytes() == (b / file).read_bytes()  # nothing cut or removed


def test_a_segment_copied_over_another_of_the_same_log_is_refused(bucket):
    log = open_log(bucket)
    for first in (0, 4, 8):  # a batch of four per segment
        log.append([payload(i, 900) for i in range(first, first + 4)])
    log.close()
    (bucket / "seg_00003.fifo").write_bytes((bucket / "seg_00002.fifo").read_bytes())
    with pytest.raises(CorruptDataError, match="this file is segment 2 of this queue, not segment 3"):
        open_log(bucket)


def write_old_log(directory: Path, segments: list[list[bytes]], closed: bool, popped: int = 0,
                  suffix: str = "fifo") -> None:
    """A log as hoardDB wrote it before identities: entries from byte 0 of each segment,
    and no identity in the state (which ``closed`` says was written by a clean close)."""
    sizes = []
    for number, entries in enumerate(segments, 1):
        data = b"".join(framing.frame_batch(entries))
        (directory / segment_name(number, suffix)).write_bytes(data)
        sizes.append(len(data))
    docs = [{"seq": 0, "head_segment": 1, "head_offset": 0, "popped": 0, "cut_segment": 0, "cut_offset": 0,
             "cut_above": 0}]
    docs.append({**docs[0], "seq": 1})
    if closed:
        docs[1]["closed"] = {"entries": sum(map(len, segments)), "segments": len(segments), "last": len(segments),
                             "bytes": sum(sizes)}
    raw = b"".join(framing.frame(encode(d)).ljust(SLOT_SIZE, b"\0") for d in docs)
    (directory / STATE_FILE).write_bytes(raw)


@pytest.mark.parametrize("closed", [True, False], ids=["closed cleanly", "after a crash"])
def test_a_log_written_before_identities_opens_and_its_new_segments_carry_one(tmp_path, closed):
    old, other = tmp_path / "old", tmp_path / "other"
    old.mkdir(), other.mkdir()
    write_old_log(old, [[payload(i, 900) for i in range(4)], [payload(i, 900) for i in range(4, 6)]], closed)
    before = {n: (old / n).read_bytes() for n in seg_files(old)}
    log = open_log(old)
    assert everything(log) == list(range(6))
    assert {n: (old / n).read_bytes() for n in seg_files(old)} == before  # nothing rewritten
    log.append([payload(i, 900) for i in range(6, 12)])  # fills seg 2, then seg 3 (the first with an identity)
    assert ids(log.take_head(1)) == [0]
    log.close()
    assert entries_start(old / "seg_00002.fifo") == 0 and entries_start(old / "seg_00003.fifo") == HDR
    state = max(filter(None, slots(old)), key=lambda s: s["seq"])
    assert state["tagged_from"] == 3 and isinstance(state["queue"], int)
    log = open_log(old)
    assert everything(log) == list(range(1, 12))
    log.close()
    # A segment with an identity stands where one without it was (and the other way round): refused.
    write_old_log(other, [[payload(i, 900) for i in range(4)]] * 3, closed=True)
    saved = (old / "seg_00003.fifo").read_bytes()
    (old / "seg_00003.fifo").write_bytes((other / "seg_00003.fifo").read_bytes())
    with pytest.raises(CorruptDataError, match="does not begin with the queue's identity"):
        open_log(old)
    (old / "seg_00003.fifo").write_bytes(saved)
    (old / "seg_00002.fifo").write_bytes(saved)
    with pytest.raises(CorruptDataError, match="seg_00002.fifo: this file is segment 3 of this queue"):
        open_log(old)


def test_an_old_lifo_may_number_a_new_segment_below_its_first_with_an_identity(tmp_path):
    """A lifo written before identities gets its identity at the open, numbered past its last
    segment (3 here); a pop of exactly that whole segment removes it without a state write,
    so after a reopen the next segment takes its number again, with an identity. (Before: the
    open after that refused it, "carries the queue's identity, which segments numbered below
    3 were written without".)"""
    old = tmp_path / "Stack"
    old.mkdir()
    write_old_log(old, [[payload(i, 900) for i in range(4)], [payload(i, 900) for i in range(4, 6)]], True, suffix="lifo")
    log = open_log(old, "lifo")
    assert ids(log.take_tail(2)) == [5, 4]  # the whole of seg 2: removed
    assert seg_files(old, "lifo") == ["seg_00001.lifo"]
    log.close()
    log = open_log(old, "lifo")
    log.append([payload(10, 900)])  # seg 1 is full: a new seg 2, with the identity
    log.close()
    assert entries_start(old / "seg_00002.lifo") == HDR
    assert verify(old, "lifo") == []
    log = open_log(old, "lifo")
    assert everything(log) == [0, 1, 2, 3, 10]
    log.close()


def test_a_pop_that_leaves_segments_makes_its_head_durable_first_with_sync_off(bucket, monkeypatch):
    """With sync off, a fifo pop that leaves a segment unlinks it: that unlink can reach the
    disk before the state write the kernel has not written back, and the stale head then
    pointed into the missing segment, so the opener read on from the next one and gave back
    its popped entries under numbers shifted by the lost ones (a fifo's claims count by
    number). The move is fsynced before the unlink now."""
    log = open_log(bucket, sync=False)
    log.append([payload(i, 900) for i in range(6)])  # seg 1: 0-3, seg 2: 4-5
    log.flush()
    synced = [(bucket / STATE_FILE).read_bytes()]  # the state file as the flush, then each fsync of it, left it

    real = segment_format.datasync

    def datasync(fd):
        real(fd)
        if fd == log._state_fd:
            synced.append((bucket / STATE_FILE).read_bytes())

    monkeypatch.setattr(segment_format, "datasync", datasync)
    assert ids(log.take_head(5)) == [0, 1, 2, 3, 4]
    assert seg_files(bucket) == ["seg_00002.fifo"]
    abandon(log)
    (bucket / STATE_FILE).write_bytes(synced[-1])  # a power cut: the unlink stayed, the state as last fsynced
    log = open_log(bucket, sync=False)
    assert everything(log) == [5]
    log.close()


def test_a_lifo_pop_of_a_whole_segment_makes_its_unlink_durable_first_with_sync_off(tmp_path, monkeypatch):
    """With sync off, a lifo pop of its whole last segment unlinks it and writes nothing
    else, and the unlink waited for the next flush: a push into the segment below could
    reach the disk first, and after a power cut the popped entry came back on top of it."""
    stack = tmp_path / "Stack"
    stack.mkdir()
    log = open_log(stack, "lifo", sync=False)
    log.append([payload(i, 900) for i in range(3)])
    log.append([payload(3, 2000)])  # too big for what is left of seg 1: seg 2
    log.flush()
    saved = (stack / "seg_00002.lifo").read_bytes()
    synced = []
    real = segment_module.fsync_directory
    monkeypatch.setattr(segment_module, "fsync_directory", lambda path: (real(path), synced.append(path)))
    assert ids(log.take_tail(1)) == [3]
    unlink_on_disk = bool(synced)
    log.append([payload(4, 100)])  # into seg 1, after the pop; the kernel writes it back
    abandon(log)
    if not unlink_on_disk:  # a power cut that kept the push and lost the unlink
        (stack / "seg_00002.lifo").write_bytes(saved)
    log = open_log(stack, "lifo", sync=False)
    assert everything(log) == [0, 1, 2, 4]
    log.close()


def test_a_segment_whose_creating_write_was_torn_is_removed_after_a_crash(bucket, caplog):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(4)])
    log.append([payload(4, 900)])  # creates seg_00002
    abandon(log)
    last = bucket / "seg_00002.fifo"
    with open(last, "r+b") as f:  # none of that write's first block reached the disk
        f.write(bytes(HDR + 100))
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket)
    assert "seg_00002.fifo: its first 32 bytes" in caplog.text
    assert everything(log) == [0, 1, 2, 3]
    log.append([payload(5, 900)])
    assert seg_files(bucket) == ["seg_00001.fifo", "seg_00002.fifo"]
    log.close()
    assert everything(open_log(bucket)) == [0, 1, 2, 3, 5]


def test_an_empty_last_segment_left_by_a_crash_does_not_leave_a_gap_in_a_fifo(bucket):
    """(Before: the opener removed it, the next segment took the number after it, and the
    open after that refused the fifo: a segment missing in the middle.)"""
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(4)])
    log.append([payload(4, 900)])  # creates seg_00002
    abandon(log)
    os.truncate(bucket / "seg_00002.fifo", 0)  # created, and nothing of it reached the disk
    log = open_log(bucket)
    assert everything(log) == [0, 1, 2, 3]
    log.append([payload(5, 900)])
    log.close()
    log = open_log(bucket)
    assert everything(log) == [0, 1, 2, 3, 5]
    log.close()


@pytest.mark.parametrize("crash", [False, True], ids=["after a clean close", "after a crash"])
def test_a_damaged_identity_before_whole_entries_is_refused(bucket, crash):
    log = open_log(bucket)
    log.append([payload(i, 900) for i in range(6)])
    abandon(log) if crash else log.close()
    with open(bucket / "seg_00002.fifo", "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    with pytest.raises(CorruptDataError, match="seg_00002.fifo: its first 32 bytes, which name the queue"):
        open_log(bucket)
    assert (bucket / "seg_00002.fifo").exists()


# -- sync off: a power cut that keeps a later segment's writes and loses an earlier one's ---------


def write_past_a_flush(bucket: Path, suffix: str) -> int:
    """Entries 0-3 flushed in seg 1; then, unflushed, entry 4 alone (it creates seg 2) and the
    batch 5-8 (5, 6, 7 fill seg 2, 8 goes to seg 3); left without a clean close. Answers the
    size of one entry's frame."""
    log = open_log(bucket, suffix, sync=False)
    log.append([payload(i, 900) for i in range(4)])
    log.flush()
    log.append([payload(4, 900)])
    log.append([payload(i, 900) for i in range(5, 9)])
    abandon(log)
    assert seg_files(bucket, suffix) == [segment_name(n, suffix) for n in (1, 2, 3)]
    return len(framing.frame(payload(0, 900)))


@pytest.mark.parametrize("suffix", ["fifo", "lifo"])
@pytest.mark.parametrize("lost, kept", [
    ("all of it", [0, 1, 2, 3]),               # the file is there, empty
    ("its last appends", [0, 1, 2, 3, 4]),      # zeros where the batch 5-8 began
    ("part of an entry", [0, 1, 2, 3, 4]),      # 4 and 5 whole, then bytes that do not check
])
def test_a_segment_whose_writes_a_power_cut_lost_takes_the_later_segments_with_it(bucket, caplog, suffix,
                                                                                  lost, kept):
    """Writeback order is the kernel's: seg 3 reached the disk, seg 2's data did not. What
    survives must be a prefix of the log, and a batch all or nothing: seg 3 held nothing
    flushed (a flush syncs seg 2 before it), so it goes too. (Before: the opener kept entry
    8, the last of a batch whose first entries were lost, and after an emptied seg 2 the
    next open refused the bucket: "a segment file before the last is empty".)"""
    entry = write_past_a_flush(bucket, suffix)
    path = bucket / segment_name(2, suffix)
    if lost == "all of it":
        os.truncate(path, 0)
    else:
        with open(path, "r+b") as f:
            at = HDR + entry if lost == "its last appends" else HDR + 2 * entry + 100
            f.seek(at)
            f.write((b"\0" if lost == "its last appends" else b"\xab") * (os.path.getsize(path) - at))
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, suffix, sync=False)
    assert everything(log) == kept
    assert f"removing {segment_name(3, suffix)}" in caplog.text
    assert segment_name(3, suffix) not in seg_files(bucket, suffix)
    log.append([payload(9, 900)])  # numbering goes on without a gap
    log.close()
    assert verify(bucket, suffix) == []
    log = open_log(bucket, suffix, sync=False)  # after the clean close: checked strictly, and sound
    assert everything(log) == kept + [9]
    log.close()


def test_a_head_past_the_end_of_a_segment_before_the_last_takes_the_later_segments_with_it(bucket, caplog):
    """The state of a pop reached the disk, the entries it popped (and those after them in
    their segment) did not: the later segments were not flushed either."""
    log = open_log(bucket, sync=False)
    log.append([payload(i, 900) for i in range(4)])
    log.append([payload(i, 900) for i in range(4, 9)])  # seg 2 and seg 3
    assert ids(log.take_head(3)) == [0, 1, 2]
    abandon(log)
    os.truncate(bucket / "seg_00001.fifo", HDR)
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, sync=False)
    assert everything(log) == []  # (before: 4-8 without 3)
    assert "removing seg_00002.fifo, seg_00003.fifo" in caplog.text
    assert seg_files(bucket) == ["seg_00001.fifo"]
    log.append([payload(9, 900)])
    log.close()
    log = open_log(bucket, sync=False)
    assert everything(log) == [9]
    log.close()


def test_a_missing_head_segment_after_a_power_cut_keeps_the_later_segments(bucket):
    """A missing file is not taken for lost writes: with sync off a pop's unlinks can reach the
    disk before its state write, and the segments after them hold flushed entries. (Passes
    before the change to the opener too: it guards the cut from reaching this case.)"""
    log = open_log(bucket, sync=False)
    log.append([payload(i, 900) for i in range(12)])  # seg 1: 0-3, seg 2: 4-7, seg 3: 8-11
    log.flush()
    state = (bucket / STATE_FILE).read_bytes()
    assert ids(log.take_head(5)) == [0, 1, 2, 3, 4]  # the head moves into seg 2; seg 1 is unlinked
    abandon(log)
    (bucket / STATE_FILE).write_bytes(state)  # that state write never reached the disk
    assert seg_files(bucket) == ["seg_00002.fifo", "seg_00003.fifo"]
    log = open_log(bucket, sync=False)
    assert everything(log) == list(range(4, 12))  # 4 was popped, unacknowledged: it comes back
    log.close()


def test_an_interrupted_cut_after_a_power_cut_takes_the_segments_pushed_after_it(bucket, caplog):
    """A lifo pop over several segments committed its cut; with sync off its unlink and the
    pushes after it were not flushed, and the power cut kept the pushes' new segments but
    not the unlink. Finishing the cut drops the pushes into the cut segment; the segments
    made after the pop go too. (Before: 22-27 were kept without 20 and 21.)"""
    log = open_log(bucket, "lifo", sync=False)
    log.append([payload(i, 900) for i in range(12)])  # seg 1: 0-3, seg 2: 4-7, seg 3: 8-11
    log.flush()
    seg3 = (bucket / "seg_00003.lifo").read_bytes()
    assert ids(log.take_tail(6)) == [11, 10, 9, 8, 7, 6]  # the cut: seg 2 at entry 6, seg 3 goes
    log.append([payload(i, 900) for i in range(20, 28)])  # 20, 21 into seg 2; then seg 4 and seg 5
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo", "seg_00002.lifo", "seg_00004.lifo", "seg_00005.lifo"]
    abandon(log)
    (bucket / "seg_00003.lifo").write_bytes(seg3)  # its unlink never reached the disk
    with caplog.at_level(logging.WARNING, logger="hoarddb.segment"):
        log = open_log(bucket, "lifo", sync=False)
    assert everything(log) == [0, 1, 2, 3, 4, 5]
    assert "removing seg_00004.lifo, seg_00005.lifo" in caplog.text
    assert seg_files(bucket, "lifo") == ["seg_00001.lifo", "seg_00002.lifo"]
    log.append([payload(30, 900)])
    log.close()
    assert verify(bucket, "lifo") == []
    log = open_log(bucket, "lifo", sync=False)
    assert everything(log) == [0, 1, 2, 3, 4, 5, 30]
    log.close()
