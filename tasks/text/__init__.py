"""Text (BERT-style encoders): the built-in MiniLM, tokenization, built-in and user text sets."""
