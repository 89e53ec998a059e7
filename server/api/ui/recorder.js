// The microphone recorded in the page: its raw samples taken through an AudioWorklet, then resampled to 16 kHz (the
// rate the speech models hear, so that ten minutes, 19 MB, fit the server's 25 MB upload limit) and made a WAV file.

import { wav } from "./wav.js";

const RATE = 16_000; // Hz of the file made

// getUserMedia and AudioWorklet exist only in a secure context (https, or http on localhost).
export const canRecord = () => window.isSecureContext && Boolean(navigator.mediaDevices?.getUserMedia)
  && "AudioWorkletNode" in window;

async function resampled(samples, rate) {
  if (rate === RATE) return samples;
  const offline = new OfflineAudioContext(1, Math.ceil(samples.length * RATE / rate), RATE);
  const buffer = offline.createBuffer(1, samples.length, rate);
  buffer.copyToChannel(samples, 0);
  const source = offline.createBufferSource();
  source.buffer = buffer;
  source.connect(offline.destination);
  source.start();
  return (await offline.startRendering()).getChannelData(0);
}

export class Recorder {
  // A recording of the default microphone, `onTime(seconds)` as its samples come; it keeps `maxSeconds` at most.
  static async start(maxSeconds, onTime) {
    const context = new AudioContext(); // made first, while the click that started it still allows sound
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      await context.audioWorklet.addModule(new URL("capture-worklet.js", import.meta.url));
      return new Recorder(context, stream, maxSeconds, onTime);
    } catch (error) {
      context.close();
      throw error;
    }
  }

  constructor(context, stream, maxSeconds, onTime) {
    this.context = context;
    this.stream = stream;
    this.chunks = [];
    this.frames = 0;
    const limit = Math.round(maxSeconds * context.sampleRate);
    this.capture = new AudioWorkletNode(context, "capture",
                                        { numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit" });
    this.capture.port.onmessage = ({ data }) => {
      const kept = data.subarray(0, limit - this.frames);
      if (kept.length === 0) return;
      this.chunks.push(kept);
      this.frames += kept.length;
      onTime(this.frames / context.sampleRate);
    };
    context.createMediaStreamSource(stream).connect(this.capture);
  }

  // The recording as a WAV file; the microphone is released.
  async stop() {
    this.capture.port.onmessage = null;
    for (const track of this.stream.getTracks()) track.stop();
    await this.context.close();
    if (this.frames === 0) throw new Error("Nothing was recorded: no sound came from the microphone.");
    const samples = new Float32Array(this.frames);
    let at = 0;
    for (const chunk of this.chunks) {
      samples.set(chunk, at);
      at += chunk.length;
    }
    const audio = wav(await resampled(samples, this.context.sampleRate), RATE);
    return new File([audio], "recording.wav", { type: audio.type });
  }
}
