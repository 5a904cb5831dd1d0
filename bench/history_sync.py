"""History sync on a scripted chat: edit, delete, swipe and swipe back, each checked against a fresh ingest.

A chat of N floors (default 200) is extracted with the scripted model (`curator/testing/scripted.py`: deterministic,
reads only the newest reply), then each scenario is applied to a copy: an edit in the middle, a deletion of the
last 40% of the chat, a swipe of the last reply, a swipe back to the first reply (restored from the shelf), an
edit of a user turn with new turns appended. For each it reports the dirty floor, the commits rolled back, the
model calls of re-extraction, the sync time (rollback, shelf, messages) and the re-extraction time, and whether the
graph equals the graph of a fresh ingest of the edited chat with the same model.

    python bench/history_sync.py [--quick] [--json] [--floors 200]
"""

from __future__ import annotations

import dataclasses

from _common import TempMemory, emit, environment, ms, now, parse_args, progress, table

from curator.testing.scripted import graph_signature, reply_text, scripted_chat, scripted_model


def scenarios(chat: list, floors: int) -> dict[str, list]:
    last = floors - 1
    swiped = chat[:last] + [dataclasses.replace(chat[last], text=reply_text(last, 1), swipe_id=1)]
    edited = list(chat)
    edited[floors // 2 + 1] = dataclasses.replace(
        edited[floors // 2 + 1], text="Mira went to the chapel and found nothing."
    )
    appended = list(chat)
    appended[floors // 2] = dataclasses.replace(appended[floors // 2], text="An edited user turn.")
    appended += scripted_chat(floors + 10)[floors:]
    return {"edit": edited, "delete": chat[:int(floors * 0.6)], "swipe": swiped, "swipe back": chat,
            "edit user + append": appended}


def fresh(messages: list) -> dict:
    with TempMemory() as temp:
        temp.memory.create_chat("c", "default")
        temp.memory.sync("c", messages, extract=True, model=scripted_model())
        return graph_signature(temp.memory, "c")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument("--floors", type=int, default=200))
    floors = 40 if args.quick else args.floors
    chat = scripted_chat(floors)
    rows = []
    with TempMemory() as temp:
        memory = temp.memory
        memory.create_chat("c", "default")
        started = now()
        memory.sync("c", chat, extract=True, model=scripted_model())
        first_ingest_s = now() - started
        progress(f"ingested {floors} floors in {first_ingest_s:.1f} s")
        current = chat
        for name, messages in scenarios(chat, floors).items():
            if name == "swipe back":
                pass  # from the swiped chat, which is what `current` holds now
            elif current is not chat:
                memory.sync("c", chat, extract=True, model=scripted_model())  # back to the original first
            calls: list[int] = []
            started = now()
            report = memory.sync("c", messages)
            sync_s = now() - started
            started = now()
            memory.extract_due("c", model=scripted_model(calls))
            extract_s = now() - started
            equal = graph_signature(memory, "c") == fresh(messages)
            rows.append({"scenario": name, "dirty_floor": report.dirty_floor, "reason": report.reason,
                         "reverted": len(report.reverted), "shelved": report.shelved,
                         "restored": len(report.restored), "model_calls": len(calls), "sync_ms": ms(sync_s),
                         "reextract_ms": ms(extract_s), "equals_fresh_ingest": equal})
            progress(f"{name}: {rows[-1]}")
            current = messages
    report = {"benchmark": "history_sync", "quick": args.quick, "env": environment(), "params": {"floors": floors},
              "results": {"first_ingest_s": round(first_ingest_s, 2), "scenarios": rows}}
    emit(args, report, render)


def render(report: dict) -> str:
    r = report["results"]
    head = f"{report['params']['floors']}-floor scripted chat, first ingest {r['first_ingest_s']} s"
    return head + "\n" + table(
        ["scenario", "dirty floor", "reason", "reverted", "shelved", "restored", "model calls", "sync ms",
         "re-extract ms", "= fresh ingest"],
        [(s["scenario"], s["dirty_floor"], s["reason"], s["reverted"], s["shelved"], s["restored"], s["model_calls"],
          s["sync_ms"], s["reextract_ms"], s["equals_fresh_ingest"]) for s in r["scenarios"]])


if __name__ == "__main__":
    main()
