"""The shared tuning records table: files of `python -m compiler_core records` in and out
(`manage.py tuning_records`), duplicates ignored, bad files refused with the line at fault."""
import pytest
from django.core.management import CommandError, call_command

from compiler_core.tune.records import RecordStore, make_record, read_jsonl
from webapp.jobs.models import TuningRecord

TARGET = "x86_64-unknown-linux-gnu/znver3/abc/t1"


def records_file(path):
    store = RecordStore(path)
    store.add(make_record("PackedGemm-1", TARGET, "PackedGemm", {"mr": 4}, True, 1e-4, None))
    store.add(make_record("PackedGemm-1", TARGET, "PackedGemm", {"mr": 6}, False, 8e-5, None))
    store.add(make_record("Conv-2", TARGET + "x", "Conv", {"split": "rows"}, False, None,
                          "crashed (killed by signal 11)"))
    return path


def test_records_round_trip_through_the_table(tmp_path):
    src = records_file(tmp_path / "in.jsonl")
    call_command("tuning_records", "import", str(src))
    call_command("tuning_records", "import", str(src))  # again: nothing new
    assert TuningRecord.objects.count() == 3
    call_command("tuning_records", "export", str(tmp_path / "out.jsonl"))
    assert sorted(map(repr, read_jsonl(tmp_path / "out.jsonl"))) == \
        sorted(map(repr, read_jsonl(src)))
    call_command("tuning_records", "export", str(tmp_path / "one.jsonl"), "--target", TARGET)
    assert len(read_jsonl(tmp_path / "one.jsonl")) == 2


def test_a_bad_records_file_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"workload": "x"}\n')
    with pytest.raises(CommandError, match="bad.jsonl:1: record lacks"):
        call_command("tuning_records", "import", str(bad))
    assert TuningRecord.objects.count() == 0
