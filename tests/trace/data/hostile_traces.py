"""Writes small traces that are hostile to a reader: PyTorch snapshot pickles that are plain data but that a
reader scanning every pair of a dict, or reading a shared list once per reference, takes minutes on
(Python's pickle.loads reads each in milliseconds), and gzip files that inflate a thousandfold. The CLI tests
(tests/cli/CMakeLists.txt) make them at test time and read them under a TIMEOUT.

    python3 hostile_traces.py OUTPUT_FOLDER [REPEATS]

shared_event.pickle: one alloc of 1 MiB and its free_completed, with REPEATS free_requested events between
them that are one dict, shared through the memo, which sets "pad" REPEATS times (Python keeps one pair).
The alloc sets "size" twice: the last value (1 MiB) wins, as in Python.

shared_blocks.pickle: REPEATS segments that are one dict, whose blocks list holds one block dict REPEATS
times, the block setting "pad" REPEATS times.

zeros.pickle.gz: 64 MiB of zeros, gzipped to 64 KiB: no pickle starts with a zero byte.
proto_then_zeros.pickle.gz: a pickle's PROTO, then 64 MiB of zeros: only a bound on inflation stops it.
"""
import gzip
import os
import pickle
import sys


def text(s):  # SHORT_BINUNICODE
    b = s.encode()
    return bytes([0x8C, len(b)]) + b


def integer(n):  # BININT
    return b"J" + n.to_bytes(4, "little", signed=True)


def dict_of(pairs, pads):
    """EMPTY_DICT, MARK, the pairs, "pad" set `pads` times by DUP, SETITEMS."""
    out = b"}("
    for key, value in pairs:
        out += text(key) + value
    if pads:
        out += text("pad") + b"2" * (2 * pads - 1)
    return out + b"u"


def list_of(first, repeats):
    """EMPTY_LIST, MARK, `first` and DUP of it, APPENDS: `repeats` references to one object."""
    return b"](" + first + b"2" * (repeats - 1) + b"e"


def shared_event(repeats):
    alloc = dict_of([("action", text("alloc")), ("addr", integer(4096)), ("size", integer(512)),
                     ("stream", integer(0)), ("size", integer(1 << 20))], 0)
    requested = dict_of([("action", text("free_requested")), ("addr", integer(4096)), ("size", integer(1 << 20))],
                        repeats)
    freed = dict_of([("action", text("free_completed")), ("addr", integer(4096)), ("size", integer(1 << 20)),
                     ("stream", integer(0))], 0)
    events = b"](" + alloc + requested + b"2" * (repeats - 1) + freed + b"e"
    return b"\x80\x04}(" + text("device_traces") + b"](" + events + b"e" + text("segments") + b"]u."


def shared_blocks(repeats):
    block = dict_of([("size", integer(512)), ("state", text("active_allocated"))], repeats)
    segment = dict_of([("device", integer(0)), ("address", integer(0)), ("total_size", integer(2 << 20)),
                       ("blocks", list_of(block, repeats))], 0)
    return b"\x80\x04}(" + text("device_traces") + b"]" + text("segments") + list_of(segment, repeats) + b"u."


def main():
    folder = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 200000
    os.makedirs(folder, exist_ok=True)
    for name, data in (("shared_event.pickle", shared_event(repeats)),
                       ("shared_blocks.pickle", shared_blocks(repeats))):
        value = pickle.loads(data)  # plain data that Python reads
        assert isinstance(value, dict) and "device_traces" in value, name
        with open(os.path.join(folder, name), "wb") as out:
            out.write(data)
    for name, start in (("zeros.pickle.gz", b""), ("proto_then_zeros.pickle.gz", b"\x80\x04")):
        with gzip.open(os.path.join(folder, name), "wb") as out:
            out.write(start)
            for _ in range(64):
                out.write(bytes(1 << 20))
    events = pickle.loads(shared_event(3))["device_traces"][0]
    assert events[0]["size"] == 1 << 20 and len(events[1]) == 4, events


if __name__ == "__main__":
    main()
