"""Entity nodes in a ranking: a person or place whose node says nothing but its name matches any query that names it,
by the name alone, and would take the place of the events that answer the question (issue 31: speakers' nodes held
a slot of the top 10 for most LoCoMo questions in `rag`). Used by both modes after their own scoring."""

from __future__ import annotations

from curator.recall.query import content_words
from curator.recall.scoring import Pool, strip_names
from curator.schemas import Schema
from curator.store.graph import Node, names_of


def is_bare(node: Node, document: str, schema: Schema) -> bool:
    """Whether an entity node's document is nothing but its names (worked out when the node enters the recall pool,
    `recall/pool.py`, not at each recall: a chat of 10k nodes has thousands of entity candidates)."""
    own = names_of(node.title, node.fields, schema.type(node.type))
    return not content_words(strip_names(document, list(own)))


def entities_in(scores: dict[str, float], query: str, mentioned: set[str], pool: Pool,
                schema: Schema) -> tuple[dict[str, bool], set[str]]:
    """The entity candidates among `scores`, each with whether its document is its name alone (`Pool.entities`), and
    those the query is about (it names them and asks nothing else: "Who is Caroline?")."""
    known, nodes = pool.entities, pool.nodes
    entities = {node_id: known[node_id] for node_id in scores if node_id in known}
    about: set[str] = set()
    named = [node_id for node_id in mentioned if node_id in entities]
    if named:
        names = [name for node_id in named for name in names_of(nodes[node_id].title, nodes[node_id].fields,
                                                                 schema.type(nodes[node_id].type))]
        if not content_words(strip_names(query, names)):
            about = set(named)
    return entities, about


def entity_focus(scores: dict[str, float], entities: dict[str, bool], about: set[str]) -> dict[str, float]:
    """Entity nodes (people, places) that say nothing but their name match a query by that name alone: a question
    about what Caroline did names Caroline, and her bare node would take a slot from the events that answer it. So
    such a node goes last (`entities`: candidate id -> whether its document is its name alone), unless the query is
    about the entity itself ("Who is Caroline?": nothing asked but the name; `about`), which puts it first."""
    if not entities or not scores:
        return scores
    out = dict(scores)
    low, high = min(scores.values()), max(scores.values())
    for node_id, bare in entities.items():
        if node_id in about:
            out[node_id] = max(out.get(node_id, low), high + 1.0)
        elif bare and node_id in out:
            out[node_id] = low - 1.0
    return out
