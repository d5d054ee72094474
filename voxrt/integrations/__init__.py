"""Adapters from agent frameworks to the voxrt client (`voxrt.client`). Each imports its framework, so import
the one you use; none is imported here, and none of the frameworks is a dependency of voxrt.

- `voxrt.integrations.pipecat`: `VoxrtTTSService`, a Pipecat TTS service (pipecat-ai 1.14).
- `voxrt.integrations.livekit`: `VoxrtTTS`, a LiveKit Agents TTS with streaming and aligned transcripts
  (livekit-agents 1.8).
"""
