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
    """``count`` documents of ``tokens`` tokens; ``tokenizer(text) -> number of tokens``, or None (a word a token).

    ValueError when there are more documents than first words, or no text of that many tokens can be made."""
    if count > len(OPENERS):
        raise ValueError(f"at most {len(OPENERS)} documents, got {count}")
    made = []
    firsts = set()
    for index in range(count):
        words = [OPENERS[index], *random.Random(index).choices(BODY, k=max(0, tokens - 1))]
        if tokenizer is None:
            made.append(Document(" ".join(words[:tokens]), tokens, False))
            continue
        made.append(_exact(words, tokens, tokenizer, index))
        first = tokenizer.first(OPENERS[index])
        if first in firsts:
            raise ValueError(f"document {index} starts with the same token as an earlier one ({first})")
        firsts.add(first)
    return made


def _exact(words, tokens, tokenizer, index):
    """The document of exactly ``tokens`` tokens by the server's count (binary search over whole words)."""
    low, high = 0, len(words)  # count(words[:low]) <= tokens; grow high until it has at least tokens
    while high < 64 * max(tokens, 1) and tokenizer.count(" ".join(words[:high])) < tokens:
        words += random.Random(f"{index}+{high}").choices(BODY, k=high)
        high = len(words)
    while high - low > 1:
        middle = (low + high) // 2
        if tokenizer.count(" ".join(words[:middle])) <= tokens:
            low = middle
        else:
            high = middle
    text = " ".join(words[: max(low, 1)])
    for letter in itertools.islice(itertools.cycle(LETTERS), 4 * max(tokens, 1)):
        counted = tokenizer.count(text)
        if counted == tokens:
            return Document(text, tokens, True)
        if counted > tokens:
            break
        text += " " + letter
    raise ValueError(f"no text of exactly {tokens} tokens found for document {index} (the server counts {counted})")


def question(number):
    """Request ``number``'s own question: a first word no other request of the run shares, then a second."""
    return f"{ASKING[number % len(ASKING)]} {ASKING[(number // len(ASKING)) % len(ASKING)]}"
