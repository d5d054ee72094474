"""Drop-in surfaces for clients that already speak another TTS API (OpenAI speech, ElevenLabs and Cartesia
WebSockets, Twilio Media Streams). Each WebSocket adapter runs the native `RealtimeSession` over a translating
link (bridge.py), so pacing, cancel and alignment have one implementation; docs/compat.md lists what differs."""
