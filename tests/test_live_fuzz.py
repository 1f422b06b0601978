"""``bendserver stress --fuzz``: random datagrams, bundles, timetags and arguments against a
live server (a JACK dummy clock where installed, else the null backend)."""

from bendserver.cli import main


def test_a_short_fuzz_leaves_the_server_alive_and_its_final_value_lands(capsys):
    code = main(["stress", "--block", "256", "--fuzz", "3", "--seed", "3"])
    out = capsys.readouterr().out
    lines = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
    assert code == 0, out
    assert lines["server"] == "alive"
    assert lines["final"].startswith("read back /engine/gain"), lines["final"]
    sent = int(lines["fuzz"].split("sent ")[1].split()[0])
    assert sent > 3000, "thousands of datagrams, of each kind"
    assert all(f"{kind}=0" not in lines["fuzz"] for kind in ("raw", "message", "corrupt", "bundle"))
    answered = int(lines["/ping"].split()[0])
    assert answered > 10, "the server answered /ping throughout"
    assert "serve " in lines["rss"] and "intake " in lines["rss"], "each process's memory"
