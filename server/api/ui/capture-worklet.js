// The recorder's AudioWorklet, on the audio thread: each block of the microphone's samples (mono, as the node's
// channelCount asks) posted to the page as it comes, copied because the engine reuses the block's buffer.

registerProcessor("capture", class extends AudioWorkletProcessor {
  process([input]) {
    if (input[0]) {
      const block = input[0].slice();
      this.port.postMessage(block, [block.buffer]);
    }
    return true;
  }
});
