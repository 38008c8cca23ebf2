# The offline recogniser, kept loaded between utterances: pocketsphinx's
# decoder with the model, dictionary and language model that
# pocketsphinx_continuous loads (Debian's pocketsphinx-en-us), through
# Debian's python3-pocketsphinx. It reads utterances from stdin, each a
# 4-byte little-endian length and that many bytes of 16 kHz mono 16-bit
# little-endian samples, and answers each on stdout with a line: "ok "
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
# parts' words joined. A fork that fails answers "error ".
import os
import struct
import sys

MODEL = "/usr/share/pocketsphinx/model/en-us"
BLOCK = 2048 * 2

out = sys.stdout.buffer
inp = sys.stdin.buffer


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
    b = inp.read(n)
    if b is None or len(b) < n:
        sys.exit(0)
    return b


def heard(parts):
    h = decoder.hyp()
    if h is not None and h.hypstr:
        parts.append(h.hypstr)


while True:
    head = inp.read(4)
    if not head:
        break
    if len(head) < 4:
        head += read(4 - len(head))
    (n,) = struct.unpack("<I", head)
    data = read(n) if n else b""
    out.flush()
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            say("error the decoder failed (wait status %d)" % status)
        continue
    parts = []
    decoder.start_utt()
    started = False
    for i in range(0, len(data), BLOCK):
        decoder.process_raw(data[i:i + BLOCK], False, False)
        speech = decoder.get_in_speech()
        if speech and not started:
            started = True
        if not speech and started:
            decoder.end_utt()
            heard(parts)
            decoder.start_utt()
            started = False
    decoder.end_utt()
    if started:
        heard(parts)
    say("ok " + " ".join(" ".join(parts).split()))
    os._exit(0)
