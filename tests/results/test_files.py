"""attnlab.results.files: written whole or not at all, never over a file when asked not to, and a device written into
rather than replaced."""

import stat

import pytest

from attnlab.results.files import CannotWrite, write_text


def test_not_over_a_file_that_is_there_and_no_temporary_file_left(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("the learner's\n")
    with pytest.raises(FileExistsError):
        write_text(path, "starter\n", over=False)
    assert path.read_text() == "the learner's\n" and sorted(p.name for p in tmp_path.iterdir()) == ["mine.py"]
    assert write_text(tmp_path / "new.py", "starter\n", over=False).read_text() == "starter\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.py", "new.py"]


def test_a_device_is_written_into_not_renamed_over(tmp_path):
    link = tmp_path / "full.json"  # through a link: were the device renamed over, only the link would go
    link.symlink_to("/dev/full")
    with pytest.raises(CannotWrite, match=r"cannot write .*full.json: No space left on device; the files written"):
        write_text(link, "{}\n")
    assert link.is_symlink() and stat.S_ISCHR(link.stat().st_mode) and not (tmp_path / "full.json.tmp").exists()
    null = tmp_path / "null"
    null.symlink_to("/dev/null")
    assert write_text(null, "{}\n") == null and stat.S_ISCHR(null.stat().st_mode)
