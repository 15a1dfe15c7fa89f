"""The lab's requests as text: documents of a given length, each request a document and its own question.

Words are three letters of ``LETTERS`` (4,096 of them; in the tiny model of ``server/tiny_model.py`` each is one
token). Document ``i`` opens with its own word and goes on with words drawn from a generator seeded by ``i``, so
documents differ from their first token and the same arguments give the same text. A request appends a question
whose first word is its own (the request's number), so only the document can be reused from one request to the
next. Where the server can count tokens (``tokenizer``), a document's length is made exact: the longest run of
words whose text has at most the requested tokens, then one-letter words until it has exactly that many.
"""

import itertools
import random

__all__ = ["LETTERS", "WORDS", "Document", "documents", "question"]

LETTERS = "abcdefghijklmnop"
WORDS = ["".join(letters) for letters in itertools.product(LETTERS, repeat=3)]
OPENERS = WORDS[:1024]  # a document's first word
BODY = WORDS[1024:3072]  # the rest of a document
ASKING = WORDS[3072:]  # questions


class Document:
    """One document's text and its length in tokens (``exact``: counted by the server)."""

    __slots__ = ("text", "tokens", "exact")

    def __init__(self, text, tokens, exact):
        self.text, self.tokens, self.exact = text, tokens, exact


def documents(count, tokens, tokenizer=None):
    """``count`` documents of ``tokens`` tokens. ``tokenizer`` is the server's (``count(text)``, the tokens of a
    text; ``first(text)``, its first token), or None: then a word is a token.

    ValueError when there are more documents than first words, two documents start with the same token, or no
    text of that many tokens can be made; the message names documents and counts, never a token (the server's)."""
    if count > len(OPENERS):
        raise ValueError(f"at most {len(OPENERS)} documents, got {count}")
    made = []
    firsts = {}  # a first token: the document that starts with it
    for index in range(count):
        words = [OPENERS[index], *random.Random(index).choices(BODY, k=max(0, tokens - 1))]
        if tokenizer is None:
            made.append(Document(" ".join(words[:tokens]), tokens, False))
            continue
        made.append(_exact(words, tokens, tokenizer, index))
        first = tokenizer.first(OPENERS[index])
        if first in firsts:  # the token itself is the server's: never shown (a server may echo a credential)
            raise ValueError(f"document {index} starts with the same token as document {firsts[first]}")
        firsts[first] = index
    return made


def _exact(words, tokens, tokenizer, index):
    """The document of exactly ``tokens`` tokens by the server's count: the most leading words within that count
    (more words drawn while all of them are too few), then one-letter words until the count is exact."""

    def counted(length):
        return tokenizer.count(" ".join(words[:length]))

    while counted(len(words)) < tokens and len(words) < 64 * tokens:
        words += random.Random(f"{index}+{len(words)}").choices(BODY, k=len(words))
    low, high = 1, len(words)  # the longest run of words within the count lies in [low, high]
    if counted(high) <= tokens:
        low = high
    while high - low > 1:  # counted(low) <= tokens < counted(high)
        middle = (low + high) // 2
        low, high = (middle, high) if counted(middle) <= tokens else (low, middle)
    text = " ".join(words[:low])
    for letter in itertools.islice(itertools.cycle(LETTERS), 4 * tokens):
        found = tokenizer.count(text)
        if found >= tokens:
            break
        text += " " + letter
    if found != tokens:
        raise ValueError(f"no text of exactly {tokens} tokens found for document {index} (the server counts {found})")
    return Document(text, tokens, True)


def question(number):
    """Request ``number``'s own question: a first word no other request of the run shares, then a second."""
    return f"{ASKING[number % len(ASKING)]} {ASKING[(number // len(ASKING)) % len(ASKING)]}"
