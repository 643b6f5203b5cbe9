"""Every golden case compiled by shufflesim and compared field by field with what real
Flink 2.3.0 produced (stream_graph, job_graph including vertex ids, stream_graph_detail)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph import StreamExecutionEnvironment, UnsupportedOperationException
from graph.plan_json import stream_graph_detail
from flink_golden_programs import PROGRAMS


def _golden_cases() -> Path:
    """`shared/` stands beside the repository (also in CI's fresh clone)."""
    candidates = [Path(__file__).resolve().parents[2].parent / "shared", Path("/work/shared")]
    for shared in candidates:
        cases = shared / "reference" / "flink-golden" / "cases"
        if cases.is_dir():
            return cases
    raise FileNotFoundError(f"golden cases not found in any of {[str(c) for c in candidates]}")


CASES = _golden_cases()
GOLDEN = {path.stem: json.loads(path.read_text()) for path in sorted(CASES.glob("*.json"))}
assert len(GOLDEN) >= 18, f"expected the 18 golden cases in {CASES}, found {len(GOLDEN)}"
COMPILED = sorted(name for name, case in GOLDEN.items() if "error" not in case)
REJECTED = sorted(name for name, case in GOLDEN.items() if "error" in case)

# Detail fields shufflesim models, with the golden key they come from.
NODE_FIELDS = ("id", "name", "operator_factory", "chaining_strategy", "parallelism", "max_parallelism",
               "slot_sharing_group", "co_location_group", "task_class", "input_requirements",
               "in_edges", "out_edges")
EDGE_FIELDS = ("source", "target", "partitioner", "partitioner_class", "type_number", "output_tag",
               "supports_unaligned_checkpoints")


def compile_case(name: str) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    PROGRAMS[name](env)
    return env


def test_every_golden_case_has_a_program():
    assert set(PROGRAMS) == set(GOLDEN)
    assert len(GOLDEN) == 18


@pytest.mark.parametrize("name", COMPILED)
def test_stream_graph_equals_flink(name):
    plan = json.loads(compile_case(name).get_execution_plan())
    assert plan == GOLDEN[name]["stream_graph"]


@pytest.mark.parametrize("name", COMPILED)
def test_job_graph_equals_flink(name):
    # Every field, vertex ids (Flink's StreamGraphHasherV2 hashes) included.
    assert compile_case(name).get_job_graph().to_dict() == GOLDEN[name]["job_graph"]


@pytest.mark.parametrize("name", COMPILED)
def test_stream_graph_detail_equals_flink(name):
    golden = GOLDEN[name]["stream_graph_detail"]
    ours = stream_graph_detail(compile_case(name).get_stream_graph())
    for key in ("job_type", "chaining_enabled", "source_ids", "sink_ids"):
        assert ours[key] == golden[key], key
    golden_nodes = {node["id"]: node for node in golden["nodes"]}
    assert [n["id"] for n in ours["nodes"]] == sorted(golden_nodes, key=[n["id"] for n in ours["nodes"]].index)
    for node in ours["nodes"]:
        expected = golden_nodes[node["id"]]
        assert {f: node[f] for f in NODE_FIELDS} == {f: expected[f] for f in NODE_FIELDS}
        # Key serializers are Java types; shufflesim models whether the node is keyed.
        assert node["keyed"] == (expected["state_key_serializer"] is not None)
    assert len(ours["edges"]) == len(golden["edges"])
    golden_edges = {(e["source"], e["target"], e["type_number"]): e for e in golden["edges"]}
    for edge in ours["edges"]:
        expected = golden_edges[(edge["source"], edge["target"], edge["type_number"])]
        assert {f: edge[f] for f in EDGE_FIELDS} == {f: expected[f] for f in EDGE_FIELDS}


@pytest.mark.parametrize("name", REJECTED)
def test_rejected_programs_raise_flinks_message(name):
    error = GOLDEN[name]["error"]
    assert error["java_type"] == "java.lang.UnsupportedOperationException"
    env = compile_case(name)
    with pytest.raises(UnsupportedOperationException) as raised:
        env.get_execution_plan()
    assert str(raised.value) == error["message"]
