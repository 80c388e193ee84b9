"""The run's metadata key file: written fresh and private, read only when it
is a private regular file of ours holding 32 bytes in hex."""

import os

import pytest

from collapsar.manager.sharing.key import KeyFileError, read_key_file, write_key_file


def test_a_written_key_reads_back_and_only_its_owner_may_read_it(tmp_path):
    path = tmp_path / "run.metadata-key"
    key = write_key_file(path)
    assert len(key) == 32 and read_key_file(path) == key
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert path.read_text() == key.hex() + "\n"
    assert write_key_file(path) != key  # fresh every time
    assert os.listdir(tmp_path) == ["run.metadata-key"]  # no temporary file left


def test_writing_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "precious"
    target.write_text("precious\n")
    path = tmp_path / "run.metadata-key"
    path.symlink_to(target)
    write_key_file(path)
    assert target.read_text() == "precious\n"
    assert not path.is_symlink() and len(read_key_file(path)) == 32


def text_file(text, mode):
    def make(path):
        path.write_text(text)
        os.chmod(path, mode)

    return make


@pytest.mark.parametrize(
    "make,text",
    [
        (
            text_file("ab" * 32, 0o644),
            r"must be owned by uid \d+ and readable by its owner only \(it is uid \d+, mode 0644\)",
        ),
        (text_file("ab" * 31, 0o600), "expected 64 hex digits"),
        (text_file("zz" * 32, 0o600), "expected 64 hex digits"),
        (lambda p: p.mkdir(), "must be a regular file"),
        (lambda p: os.mkfifo(p, 0o600), "must be a regular file"),
        (lambda p: p.symlink_to(p.with_name("elsewhere")), r"cannot open the metadata key \(Too many levels"),
        (lambda p: None, r"cannot open the metadata key \(No such file or directory\)"),
    ],
)
def test_unsafe_or_wrong_key_files_are_refused_in_one_line(tmp_path, make, text):
    path = tmp_path / "key"
    (tmp_path / "elsewhere").write_text("ab" * 32)
    make(path)
    with pytest.raises(KeyFileError, match=text) as caught:
        read_key_file(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
