"""Encode: load the tokenizer and turn records into documents (token ids, EOS, supervision) in a token store."""
