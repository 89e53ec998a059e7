// Samples (-1 to 1) as a WAV file, 16-bit PCM mono: a format the server's soundfile decodes, unlike the WebM that
// MediaRecorder makes.

const HEADER = 44; // bytes of the RIFF, fmt and data headers

export function wav(samples, rate) {
  const view = new DataView(new ArrayBuffer(HEADER + samples.length * 2));
  const ascii = (at, text) => [...text].forEach((c, i) => view.setUint8(at + i, c.charCodeAt(0)));
  ascii(0, "RIFF");
  view.setUint32(4, HEADER - 8 + samples.length * 2, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // the fmt chunk's size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // channels
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * 2, true); // bytes a second
  view.setUint16(32, 2, true); // bytes a frame
  view.setUint16(34, 16, true); // bits a sample
  ascii(36, "data");
  view.setUint32(40, samples.length * 2, true);
  samples.forEach((sample, i) => view.setInt16(HEADER + i * 2, Math.round(Math.max(-1, Math.min(1, sample)) * 32767),
                                               true));
  return new Blob([view], { type: "audio/wav" });
}
