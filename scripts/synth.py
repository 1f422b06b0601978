"""Seeded signal generators that make the training and demo material of the bundled models.

Nothing here downloads data: every training signal is synthesized from a ``numpy`` random
generator, so a training script that seeds its generator reproduces its data bit for bit.
All signals are mono ``float32`` arrays at :data:`SR` (48 kHz).

The building blocks are single events (a Karplus-Strong pluck, an additive-synthesis note,
a chirp, a filtered noise burst, drum hits) and *material* functions that scatter events on
a timeline with random onsets, pitches and gains: :func:`strings_material` (plucked and
tonal), :func:`percussion_material` (drum hits and noise bursts) and :func:`mixed_material`
(a bit of everything, for effects that must work on any input).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SR = 48000
"""Sample rate of every generated signal, in Hz."""

# Pentatonic-ish scale degrees (semitones) used to pick musical pitches.
_SCALE = np.array([0, 2, 4, 7, 9])

Event = Callable[[np.random.Generator], np.ndarray]


def midi_to_hz(note: float) -> float:
    """Frequency in Hz of a (possibly fractional) MIDI note number."""
    return 440.0 * 2.0 ** ((note - 69.0) / 12.0)


def random_pitch(rng: np.random.Generator, low: int, high: int) -> float:
    """A frequency from a pentatonic scale between MIDI notes ``low`` and ``high``."""
    octave = rng.integers(low // 12, high // 12 + 1)
    note = 12 * octave + rng.choice(_SCALE)
    return midi_to_hz(float(np.clip(note, low, high)))


def db_to_gain(db: float | np.ndarray) -> float | np.ndarray:
    """Linear amplitude of a level in decibels."""
    return 10.0 ** (np.asarray(db) / 20.0)


def fft_convolve(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Causal linear convolution of ``x`` with impulse response ``h``, cut to ``len(x)``.

    Used to apply IIR-like filters through their (truncated) impulse responses: numpy has no
    recursive filter and a per-sample Python loop over minutes of audio would be slow.
    """
    n = len(x) + len(h) - 1
    size = 1 << (n - 1).bit_length()
    y = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)
    return y[: len(x)].astype(np.float32)


def one_pole_coefficient(cutoff: float) -> float:
    """Feedback coefficient ``a`` of ``y[n] = (1 - a) x[n] + a y[n-1]`` for a cutoff in Hz."""
    return float(np.exp(-2.0 * np.pi * cutoff / SR))


def one_pole_lowpass_ir(cutoff: float, tolerance: float = 1e-7) -> np.ndarray:
    """Impulse response of a one-pole low-pass, truncated once it falls below ``tolerance``."""
    a = one_pole_coefficient(cutoff)
    length = max(2, int(np.ceil(np.log(tolerance) / np.log(a))) + 1)
    return ((1.0 - a) * a ** np.arange(length)).astype(np.float64)


def lowpass(x: np.ndarray, cutoff: float) -> np.ndarray:
    """``x`` through a one-pole low-pass filter (6 dB/octave) starting from rest."""
    return fft_convolve(x, one_pole_lowpass_ir(cutoff))


def highpass(x: np.ndarray, cutoff: float) -> np.ndarray:
    """``x`` minus its one-pole low-pass: a first-order high-pass starting from rest."""
    return (x - lowpass(x, cutoff)).astype(np.float32)


def bandpass_noise(rng: np.random.Generator, length: int, center: float, q: float) -> np.ndarray:
    """White noise shaped by a Gaussian band around ``center`` Hz (``q``: center / width)."""
    spectrum = np.fft.rfft(rng.standard_normal(length))
    freqs = np.fft.rfftfreq(length, 1.0 / SR)
    width = center / q
    spectrum *= np.exp(-0.5 * ((freqs - center) / width) ** 2)
    noise = np.fft.irfft(spectrum, length)
    return (noise / (np.abs(noise).max() + 1e-9)).astype(np.float32)


def exp_decay(length: int, seconds: float) -> np.ndarray:
    """An exponential envelope that falls by 60 dB after ``seconds``."""
    t = np.arange(length) / SR
    return np.exp(-6.9078 * t / seconds).astype(np.float32)


def adsr(length: int, attack: float, decay: float, sustain: float, release: float) -> np.ndarray:
    """A linear attack / exponential decay to ``sustain`` / linear release envelope (seconds)."""
    t = np.arange(length) / SR
    env = np.where(
        t < attack,
        t / max(attack, 1e-4),
        sustain + (1.0 - sustain) * np.exp(-(t - attack) / max(decay, 1e-4)),
    )
    tail = min(length, int(release * SR))
    if tail > 0:
        env[-tail:] *= np.linspace(1.0, 0.0, tail)
    return env.astype(np.float32)


def karplus_strong(
    rng: np.random.Generator, freq: float, seconds: float, t60: float, brightness: float
) -> np.ndarray:
    """A plucked string: a noise burst recirculating through a damped, averaging delay line.

    The delay line is one period long, so each period depends only on the previous one and
    the recursion is computed one whole period at a time (vectorized). ``brightness`` (0-1)
    sets the cutoff of the low-pass that softens the excitation, ``t60`` the decay time.
    """
    period = max(2, int(round(SR / freq)))
    length = int(seconds * SR)
    periods = length // period + 2
    damping = 0.001 ** (1.0 / (freq * t60))
    excitation = rng.uniform(-1.0, 1.0, period).astype(np.float32)
    excitation = lowpass(excitation, 500.0 + brightness * 12000.0)
    excitation -= excitation.mean()
    line = np.zeros(1 + periods * period, dtype=np.float32)
    line[1 : 1 + period] = excitation
    gain = damping * 0.5  # the averaging filter's 1/2 folded into the damping
    for k in range(1, periods):
        last = 1 + (k - 1) * period  # start of the previous period
        line[last + period : last + 2 * period] = gain * (
            line[last : last + period] + line[last - 1 : last + period - 1]
        )
    out = line[1 : 1 + length]
    return (out / (np.abs(out).max() + 1e-9)).astype(np.float32)


def additive_tone(
    freq: float, length: int, harmonics: np.ndarray, vibrato: float = 0.0, phase: float = 0.0
) -> np.ndarray:
    """A sum of harmonics of ``freq`` (amplitudes ``harmonics``), kept below Nyquist.

    ``vibrato`` is the depth in semitones of a 5.5 Hz pitch modulation.
    """
    t = np.arange(length) / SR
    inst = freq * 2.0 ** (vibrato / 12.0 * np.sin(2 * np.pi * 5.5 * t))
    base_phase = 2 * np.pi * np.cumsum(inst) / SR + phase
    out = np.zeros(length, dtype=np.float64)
    for k, amp in enumerate(harmonics, start=1):
        if k * freq * 1.03 >= SR / 2:
            break
        out += amp * np.sin(k * base_phase)
    return (out / (np.abs(out).max() + 1e-9)).astype(np.float32)


def harmonic_profile(rng: np.random.Generator, count: int = 24) -> np.ndarray:
    """Random harmonic amplitudes between a sine, a square-like and a saw-like spectrum."""
    k = np.arange(1, count + 1)
    kind = rng.integers(3)
    if kind == 0:
        amps = np.exp(-(k - 1) * rng.uniform(0.8, 2.0))
    elif kind == 1:
        amps = np.where(k % 2 == 1, 1.0 / k, 0.0)
    else:
        amps = 1.0 / k ** rng.uniform(0.9, 1.6)
    return amps


def pluck_event(rng: np.random.Generator) -> np.ndarray:
    """A Karplus-Strong pluck at a random pitch, brightness and decay."""
    freq = random_pitch(rng, 40, 84)
    seconds = rng.uniform(0.4, 2.0)
    return karplus_strong(
        rng, freq, seconds, t60=rng.uniform(0.6, 3.0), brightness=rng.uniform(0.1, 1.0)
    ) * exp_decay(int(seconds * SR), 4.0)


def note_event(rng: np.random.Generator) -> np.ndarray:
    """A sustained additive-synthesis note (sine to saw) with an ADSR envelope and vibrato."""
    freq = random_pitch(rng, 36, 88)
    length = int(rng.uniform(0.2, 1.5) * SR)
    tone = additive_tone(
        freq,
        length,
        harmonic_profile(rng),
        vibrato=rng.uniform(0.0, 0.3),
        phase=rng.uniform(0, 2 * np.pi),
    )
    env = adsr(
        length,
        rng.uniform(0.002, 0.15),
        rng.uniform(0.05, 0.5),
        rng.uniform(0.2, 0.9),
        rng.uniform(0.02, 0.2),
    )
    return tone * env


def chirp_event(rng: np.random.Generator) -> np.ndarray:
    """A logarithmic sine sweep between two random frequencies."""
    length = int(rng.uniform(0.2, 1.2) * SR)
    f0, f1 = np.exp(rng.uniform(np.log(40.0), np.log(8000.0), 2))
    freq = f0 * (f1 / f0) ** np.linspace(0.0, 1.0, length)
    tone = np.sin(2 * np.pi * np.cumsum(freq) / SR)
    return (tone * adsr(length, 0.01, 0.5, 0.6, 0.05)).astype(np.float32)


def noise_burst_event(rng: np.random.Generator) -> np.ndarray:
    """Band-limited noise with a short exponential envelope (a shaker, a breath, a scrape)."""
    length = int(rng.uniform(0.05, 0.6) * SR)
    noise = bandpass_noise(rng, length, rng.uniform(300.0, 12000.0), rng.uniform(0.5, 4.0))
    return noise * exp_decay(length, rng.uniform(0.03, 0.5)) * adsr(length, 0.002, 1, 1, 0.01)


def kick_event(rng: np.random.Generator) -> np.ndarray:
    """A kick drum: a sine whose pitch falls exponentially, with a click at the onset."""
    length = int(rng.uniform(0.25, 0.6) * SR)
    t = np.arange(length) / SR
    low, high = rng.uniform(40.0, 70.0), rng.uniform(120.0, 300.0)
    freq = low + (high - low) * np.exp(-t / rng.uniform(0.01, 0.05))
    body = np.sin(2 * np.pi * np.cumsum(freq) / SR) * exp_decay(length, rng.uniform(0.15, 0.5))
    click = bandpass_noise(rng, length, 3000.0, 1.0) * exp_decay(length, 0.01)
    return (body + 0.3 * click).astype(np.float32)


def snare_event(rng: np.random.Generator) -> np.ndarray:
    """A snare drum: a short tonal body plus a longer band-limited noise rattle."""
    length = int(rng.uniform(0.15, 0.4) * SR)
    t = np.arange(length) / SR
    body = np.sin(2 * np.pi * rng.uniform(150.0, 250.0) * t) * exp_decay(length, 0.08)
    rattle = bandpass_noise(rng, length, rng.uniform(2000.0, 6000.0), 0.7)
    rattle *= exp_decay(length, rng.uniform(0.1, 0.3))
    return (0.6 * body + rattle).astype(np.float32)


def hat_event(rng: np.random.Generator) -> np.ndarray:
    """A hi-hat: high-passed noise with a very short (closed) or longer (open) decay."""
    length = int(rng.uniform(0.05, 0.4) * SR)
    noise = highpass(rng.uniform(-1.0, 1.0, length).astype(np.float32), rng.uniform(5e3, 9e3))
    return noise / (np.abs(noise).max() + 1e-9) * exp_decay(length, rng.uniform(0.03, 0.3))


def tom_event(rng: np.random.Generator) -> np.ndarray:
    """A tom or woodblock: a damped inharmonic pair of partials."""
    length = int(rng.uniform(0.1, 0.5) * SR)
    t = np.arange(length) / SR
    f = rng.uniform(80.0, 900.0)
    tone = np.sin(2 * np.pi * f * t) + 0.5 * np.sin(2 * np.pi * f * 1.59 * t)
    return (tone * exp_decay(length, rng.uniform(0.05, 0.4)) / 1.5).astype(np.float32)


STRING_EVENTS: tuple[Event, ...] = (pluck_event, pluck_event, note_event)
"""Plucked-string and tonal events (plucks twice as likely)."""

PERCUSSION_EVENTS: tuple[Event, ...] = (
    kick_event,
    snare_event,
    hat_event,
    hat_event,
    tom_event,
    noise_burst_event,
)
"""Drum hits and noise bursts (hats twice as likely)."""

MIXED_EVENTS: tuple[Event, ...] = STRING_EVENTS + PERCUSSION_EVENTS + (chirp_event,)
"""Every kind of event, for effects that must handle any input."""


def scatter(
    rng: np.random.Generator,
    seconds: float,
    events: tuple[Event, ...],
    rate: float,
    gain_db: tuple[float, float],
) -> np.ndarray:
    """Events drawn from ``events`` at Poisson onsets (``rate`` per second), summed.

    Each event gets a random gain in ``gain_db``; the sum is soft-limited by ``tanh`` only if
    it ever exceeds full scale, so most of it stays a plain linear mix.
    """
    length = int(seconds * SR)
    out = np.zeros(length, dtype=np.float32)
    onset = 0.0
    while True:
        onset += rng.exponential(1.0 / rate)
        start = int(onset * SR)
        if start >= length:
            break
        event = events[rng.integers(len(events))](rng)
        event = event * float(db_to_gain(rng.uniform(*gain_db)))
        stop = min(length, start + len(event))
        out[start:stop] += event[: stop - start]
    if np.abs(out).max() > 1.0:
        out = np.tanh(out)
    return out.astype(np.float32)


def strings_material(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Plucked strings and sustained tonal notes, a few overlapping at a time."""
    return scatter(rng, seconds, STRING_EVENTS, rate=3.0, gain_db=(-24.0, -4.0))


def percussion_material(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Kicks, snares, hats, toms and noise bursts at a busy rate."""
    return scatter(rng, seconds, PERCUSSION_EVENTS, rate=5.0, gain_db=(-24.0, -4.0))


def mixed_material(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Every kind of event, at levels from quiet (-40 dB) to full scale."""
    return scatter(rng, seconds, MIXED_EVENTS, rate=3.0, gain_db=(-40.0, 0.0))


def riff(rng: np.random.Generator, seconds: float, bpm: float = 110.0) -> np.ndarray:
    """A plucked riff on an eighth-note grid with a kick and hat beat: demo material."""
    length = int(seconds * SR)
    out = np.zeros(length, dtype=np.float32)
    step = int(SR * 30.0 / bpm)
    root = rng.integers(40, 52)
    for i, start in enumerate(range(0, length, step)):
        note = root + _SCALE[rng.integers(len(_SCALE))] + 12 * (i % 8 == 7)
        pluck = karplus_strong(rng, midi_to_hz(note), 1.0, t60=1.5, brightness=0.6)
        hits = [(pluck, 0.5)]
        if i % 4 == 0:
            hits.append((kick_event(rng), 0.6))
        if i % 2 == 1:
            hits.append((hat_event(rng), 0.15))
        for sound, gain in hits:
            stop = min(length, start + len(sound))
            out[start:stop] += gain * sound[: stop - start]
    return (out / max(1.0, float(np.abs(out).max()))).astype(np.float32)


def write_flac(path: str, audio: np.ndarray, peak: float = 0.9) -> None:
    """Write ``audio`` as 16-bit mono FLAC at :data:`SR`, scaled down if it exceeds ``peak``."""
    import soundfile

    audio = np.asarray(audio, dtype=np.float32)
    top = float(np.abs(audio).max())
    if top > peak:
        audio = audio * (peak / top)
    soundfile.write(path, audio, SR, subtype="PCM_16", format="FLAC")
