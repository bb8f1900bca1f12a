"""Search-R1-style question answering: a search tool over a corpus, exact-match reward."""

from envs.base import register
from envs.searchqa.env import SearchQA, State
from envs.searchqa.format import exact_match, normalize_answer, parse_action
from envs.searchqa.kb import Dataset, generated
from envs.searchqa.retrieval import BM25Retriever, Hop, Passage, Question, Retriever
from envs.searchqa.verifier import SearchQAVerifier

__all__ = [
    "BM25Retriever", "Dataset", "Hop", "Passage", "Question", "Retriever", "SearchQA",
    "SearchQAVerifier", "State", "exact_match", "generated", "normalize_answer", "parse_action",
]

register("searchqa", SearchQA)
