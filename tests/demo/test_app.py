"""The running page (scripts/demo.py in a subprocess) through gradio_client: endpoints, errors,
where uploads land, and the script's own errors."""

from __future__ import annotations

import pytest
from helpers import REPO, load_script

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def client(demo_server):
    return gradio_client.Client(demo_server.url, verbose=False)


def test_fill_answers_like_fill_mask(client, demo_fill_mask, trained):
    text = "a small [MASK] circle left of a large [MASK] square"
    status, bars, picture, as_json = client.predict(
        gradio_client.handle_file(str(trained.photo)), text, 3, api_name="/fill")
    assert status.startswith("Answered in ")
    expected = demo_fill_mask.compare(text, str(trained.photo), top_k=3)
    for got, want in zip(as_json["masks"], expected["masks"], strict=True):
        assert [g["token_str"] for g in got["with_image"]] == \
            [g["token_str"] for g in want["with_image"]]
        assert [g["score"] for g in got["text_only"]] == \
            pytest.approx([g["score"] for g in want["text_only"]], abs=1e-5)
    assert bars.count('class="vb-mask"') == 2
    with open(picture, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_inputs_get_messages_and_the_server_keeps_serving(client, trained, tmp_path):
    photo = gradio_client.handle_file(str(trained.photo))
    status, bars, picture, as_json = client.predict(photo, "a red circle", 3, api_name="/fill")
    assert status.startswith("**Cannot answer:** No [MASK]")
    assert (bars, picture, as_json) == ("", None, None)
    status, *_ = client.predict(photo, "a [MASK] " * 100, 3, api_name="/fill")
    assert "characters long" in status
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    with pytest.raises(Exception, match=r"Cannot read 'broken\.png' as an image"):
        client.predict(gradio_client.handle_file(str(broken)), "a [MASK]", 3, api_name="/fill")
    status, *_ = client.predict(photo, "a [MASK] circle", 3, api_name="/fill")
    assert status.startswith("Answered in ")


def test_uploads_land_only_in_the_servers_temp_folder(client, demo_server, trained):
    client.predict(gradio_client.handle_file(str(trained.photo)), "a [MASK]", 2, api_name="/fill")
    upload_folders = list(demo_server.tmp.glob("vitbert-demo-*"))
    assert len(upload_folders) == 1
    assert any(p.name == trained.photo.name for p in upload_folders[0].rglob("*"))
    assert list(demo_server.cwd.iterdir()) == []  # nothing written where it was started
    # Gradio writes .pyi stubs beside components it builds: none in the project's own folders
    # (not the whole clone, which may hold a virtual environment with stubs of its own).
    assert not [stub for folder in ("src", "scripts", "tests")
                for stub in (REPO / folder).glob("**/*.pyi")]


@pytest.mark.parametrize("case", ["not a checkpoint", "no examples folder"])
def test_script_exits_2_with_one_line(case, trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # main() sets it; restored after
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    if case == "not a checkpoint":
        bad = tmp_path / "notes.ckpt"
        bad.write_text("these are not weights\n")
        argv = ["--ckpt", str(bad)]
    else:
        argv = ["--ckpt", str(trained.ckpt), "--examples", str(tmp_path / "none")]
    assert load_script("demo").main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert ("--examples" in err[0]) == (case == "no examples folder")
    assert not list(tmp_path.glob("vitbert-demo-*"))  # its temp folder removed on the way out



def test_the_server_says_where_it_is_and_names_the_scripts_share_flag(demo_server):
    """Gradio's own hint names ``share=True`` in ``launch()``, which a user of the script cannot
    set; the page's address line names ``--share`` instead."""
    log = demo_server.log.read_text()
    assert f"vitbert demo running on {demo_server.url}" in log
    assert "a public link: add --share" in log and "share=True" not in log
