"""What a fork costs (a SillyTavern branch or checkpoint): the copied commit log the store makes, against what
copy-on-write of the log would cost, measured in the same run on the same chat.

A chat of N floors (default 400) is extracted with the scripted model, then forked at 10%, 50%, 90% and 100% of
its floors. For each fork point:

- **copied log** (what `curator/store/forks.py` does): the whole fork, in one transaction: the projection rows copied,
  the commits anchored at or below the floor copied, the later ones reverted on the copy; then, as after any commit
  with the vector index open (as in `curator serve`), the index embeds the fork's nodes. Its time, the time of the
  store's part alone (the same fork with no index), and the bytes it adds to the store (commit rows, graph rows,
  messages);
- **copy-on-write**: the same fork without copying the commit rows (the fork would point at its parent's log up to
  the floor instead): the copied log's time less the copy of the commit rows, measured on its own in a transaction
  that is rolled back; the bytes it would save are those rows' (ops and undo records).

Copy-on-write saves only the commit rows: a fork must own its graph rows anyway (every query reads a chat's own
rows), and its rollbacks, exports, deletes and migrations would have to follow pointers into another chat whose
own rollbacks delete the very rows shared. The figures say how much that would buy.

    python bench/fork_cost.py [--quick] [--json] [--floors 400]
"""

from __future__ import annotations

import json

from _common import TempMemory, emit, environment, ms, now, parse_args, progress, table

from curator.store.forks import fork_chat
from curator.testing.scripted import scripted_chat, scripted_model

SHARES = (0.1, 0.5, 0.9, 1.0)


def _bytes(conn, sql: str, params: tuple) -> int:
    return int(conn.execute(sql, params).fetchone()[0] or 0)


def chat_bytes(store, chat_id: str) -> dict:
    """Bytes of a chat's rows: its commit log (ops and undo records), graph rows and messages."""
    conn = store.conn
    return {
        "commits": _bytes(conn, "SELECT SUM(LENGTH(ops_json) + LENGTH(undo_json) + LENGTH(note) + 40) FROM commits "
                                "WHERE chat_id=?", (chat_id,)),
        "graph": _bytes(conn, "SELECT SUM(LENGTH(fields_json) + LENGTH(title) + 120) FROM nodes WHERE chat_id=?",
                        (chat_id,)) + _bytes(conn, "SELECT COUNT(*) * 90 FROM edges WHERE chat_id=?", (chat_id,)),
        "messages": _bytes(conn, "SELECT SUM(LENGTH(text) + LENGTH(name) + 40) FROM messages WHERE chat_id=?",
                           (chat_id,)),
    }


def commit_copy_seconds(store, parent: str, floor: int) -> float:
    """The copy of the commit rows alone (what copy-on-write would not do), timed in a transaction rolled back."""
    conn = store.conn
    conn.begin()
    try:
        began = now()
        conn.execute("INSERT INTO commits (chat_id, anchor_floor, origin, at, ops_json, undo_json, note) "
                     "SELECT 'scratch-copy', anchor_floor, origin, at, ops_json, undo_json, note FROM commits "
                     "WHERE chat_id=? AND anchor_floor <= ? ORDER BY id", (parent, floor))
        return now() - began
    finally:
        conn.rollback_quietly()


def main() -> None:
    args = parse_args(__doc__.split("\n")[0], lambda p: p.add_argument("--floors", type=int, default=400))
    floors = 40 if args.quick else args.floors
    rows = []
    with TempMemory() as temp:
        memory = temp.memory
        memory.create_chat("main", "default")
        progress(f"extracting a {floors}-floor chat with the scripted model ...")
        memory.sync("main", scripted_chat(floors), extract=True, model=scripted_model())
        parent = chat_bytes(memory.store, "main")
        progress("embedding the parent (the vector index, as a service holds it open) ...")
        began = now()
        memory.index.sync("main")  # loads the embedder too
        parent_index = now() - began
        for share in SHARES:
            floor = max(0, int(floors * share) - 1)
            chat_id = f"fork-{share}"
            began = now()
            result = memory.fork("main", chat_id, floor)  # with the index open: the fork's vectors follow
            copied = now() - began
            began = now()
            memory.index.sync(chat_id)  # nothing left to do when the fork's vectors came along
            index_after = now() - began
            listeners, memory.store.on_change = memory.store.on_change, []  # the store's part alone: no index
            began = now()
            fork_chat(memory.store, "main", f"{chat_id}-store-only", floor)
            store_only = now() - began
            memory.store.on_change = listeners
            cow = copied - commit_copy_seconds(memory.store, "main", floor)
            added = chat_bytes(memory.store, chat_id)
            rows.append({"floor": floor, "commits": result.commits, "nodes": result.nodes,
                         "index_after_ms": ms(index_after), "store_only_ms": ms(store_only),
                         "reverted": result.reverted, "copied_log_ms": ms(copied), "cow_ms": ms(max(cow, 0.0)),
                         "bytes_copied_log": sum(added.values()), "bytes_cow": added["graph"] + added["messages"],
                         "commit_bytes": added["commits"]})
            progress(f"fork at floor {floor}: {rows[-1]['copied_log_ms']} ms")
    report = {"benchmark": "fork_cost", "quick": args.quick, "env": environment(),
              "params": {"floors": floors, "shares": list(SHARES)},
              "results": {"parent_bytes": parent, "parent_index_ms": ms(parent_index), "forks": rows}}
    emit(args, report, render)


def render(report: dict) -> str:
    r = report["results"]
    lines = [f"parent: {report['params']['floors']} floors, rows {json.dumps(r['parent_bytes'])} bytes; "
             f"its vector index built in {r['parent_index_ms']} ms (embedder load included)"]
    lines.append(table(["fork at floor", "commits", "nodes", "reverted", "copied log ms", "copy-on-write ms",
                        "store part ms", "copied log KB", "copy-on-write KB", "commit rows KB"],
                       [(f["floor"], f["commits"], f["nodes"], f["reverted"], f["copied_log_ms"], f["cow_ms"],
                         f["store_only_ms"], f["bytes_copied_log"] / 1024, f["bytes_cow"] / 1024,
                         f["commit_bytes"] / 1024)
                        for f in r["forks"]]))
    lines.append("copied log ms: the whole fork with the vector index open (it embeds the fork's nodes); store part: "
                 "the same fork with no index; copy-on-write: the copied log less the copy of the commit rows")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
