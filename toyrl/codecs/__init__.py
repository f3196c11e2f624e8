"""Turn formats: how an env's state becomes tokens and a policy's tokens become an action.

- ``toy``: the toy policy's turns (reasoning tokens, END, one action token) and the turn grammar
  that samples them (``ToyCodec``, ``TurnGrammar``);
- ``text``: free text parsed like an LLM agent's reply (``TextCodec``) and TinyLM's ``WordTokenizer``.

Imported by their full names (``from toyrl.codecs.toy import ToyCodec``).
"""
