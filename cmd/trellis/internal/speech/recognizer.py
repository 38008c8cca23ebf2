# The offline recogniser, kept loaded between utterances: pocketsphinx's
# decoder with the model, dictionary and language model that
# pocketsphinx_continuous loads (Debian's pocketsphinx-en-us), through
# Debian's python3-pocketsphinx. It reads utterances from stdin as they
# are spoken: each a run of pieces, a piece a 4-byte little-endian length
# and that many bytes of 16 kHz mono 16-bit little-endian samples, ended
# by a piece of length 0. It answers each on stdout with a line: "ok "
# and the words heard. It writes "ready" once the decoder is loaded, or
# "missing " and what is not installed, and ends at the end of stdin.
#
# Each utterance is decoded by a fork of the loaded process: a decoder
# carries state from one utterance to the next (its live cepstral mean),
# so one kept for every utterance would hear each caller through the
# ones before. The fork starts from the decoder as loaded, as a new
# pocketsphinx_continuous does, and shares its memory; it costs a few
# milliseconds where loading costs a second. It decodes as
# pocketsphinx_continuous -infile decodes a file: in blocks of 2048
# samples, split where its voice activity detector hears speech end, the
# parts' words joined. It decodes each block as soon as it has it, so
# that at the end of an utterance only its last block and the search's
# last pass are left. A piece of length 0xFFFFFFFF (and no bytes) says
# the audio paused, perhaps at the utterance's end: a fork of the fork
# finishes the utterance as it stands (on another core) while the fork
# waits; more audio drops it, the end takes its words, so that an
# utterance that ends after a pause is heard by the time the pause is
# known to be its end. A fork that fails answers "error ", and the
# recogniser ends (where the utterance's pieces end is lost with it).
#
# stdin is read unbuffered: the fork reads the utterance's pieces from
# the same descriptor, and a buffer would hand them to both processes.
import os
import signal
import struct
import sys

MODEL = "/usr/share/pocketsphinx/model/en-us"
BLOCK = 2048 * 2
PAUSE = 0xFFFFFFFF

out = sys.stdout.buffer


def say(line):
    out.write(line.encode("utf-8", "replace") + b"\n")
    out.flush()


try:
    from pocketsphinx.pocketsphinx import Decoder
except ImportError as e:
    say("missing the pocketsphinx Python module (%s)" % e)
    sys.exit(0)

config = Decoder.default_config()
config.set_string("-hmm", MODEL + "/en-us")
config.set_string("-lm", MODEL + "/en-us.lm.bin")
config.set_string("-dict", MODEL + "/cmudict-en-us.dict")
config.set_string("-logfn", "/dev/null")
try:
    decoder = Decoder(config)
except Exception as e:
    say("missing the US English model in %s (%s)" % (MODEL, e))
    sys.exit(0)
say("ready")


def read(n):
    """Exactly n bytes of stdin, or None at its end."""
    got, left = [], n
    while left:
        more = os.read(0, min(left, 1 << 16))
        if not more:
            return None
        got.append(more)
        left -= len(more)
    return b"".join(got)


def heard(parts):
    h = decoder.hyp()
    if h is not None and h.hypstr:
        parts.append(h.hypstr)


def decode(head):
    """Decodes an utterance whose first piece's length is head."""
    parts = []
    started = False
    decoder.start_utt()

    def block(b):
        nonlocal started
        decoder.process_raw(b, False, False)
        speech = decoder.get_in_speech()
        if speech and not started:
            started = True
        if not speech and started:
            decoder.end_utt()
            heard(parts)
            decoder.start_utt()
            started = False

    def finish(rest):
        if rest:
            block(rest)
        decoder.end_utt()
        if started:
            heard(parts)
        return " ".join(" ".join(parts).split())

    def speculate(rest):
        """A fork finishing the utterance as it is, writing its words to a
        pipe: the answer if no more comes."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.write(w, finish(rest).encode("utf-8", "replace"))
            os._exit(0)
        os.close(w)
        return pid, r

    def outcome(spec):
        """The speculation's words, or None if it failed."""
        pid, r = spec
        got = []
        while True:
            b = os.read(r, 1 << 16)
            if not b:
                break
            got.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        return b"".join(got).decode("utf-8", "replace") if status == 0 else None

    def drop(spec):
        pid, r = spec
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)

    rest = b""
    spec = None
    while True:
        (n,) = struct.unpack("<I", head)
        if n == 0:
            break
        if n == PAUSE:
            if spec is None:
                spec = speculate(rest)
        else:
            if spec is not None:
                drop(spec)
                spec = None
            data = read(n)
            if data is None:
                os._exit(1)
            data = rest + data
            whole = len(data) - len(data) % BLOCK
            for i in range(0, whole, BLOCK):
                block(data[i:i + BLOCK])
            rest = data[whole:]
        head = read(4)
        if head is None:
            os._exit(1)
    text = outcome(spec) if spec is not None else None
    if text is None:
        text = finish(rest)
    say("ok " + text)


while True:
    head = read(4)
    if head is None:
        break
    out.flush()
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            say("error the decoder failed (wait status %d)" % status)
            sys.exit(0)
        continue
    decode(head)
    os._exit(0)
