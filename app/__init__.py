"""respgate: a stateful, tool-executing OpenAI Responses API gateway."""

__version__ = "0.1.0"
