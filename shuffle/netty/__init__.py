"""The Netty-style protocol: messages, framing, server and client handlers."""
