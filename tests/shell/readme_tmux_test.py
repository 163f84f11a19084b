#!/usr/bin/env python3
"""tests/shell/readme_tmux_test.py: the README's first session, typed into the real REPL in tmux.

Reads the session from README.md (the fenced block under "## A first session"): lines starting
with "sl> " or "..> " are typed (tmux send-keys -l, then Enter); the lines after a command, up
to the next "sl> ", are what it must print. Each expected line must appear, in order, in that
command's output, where numbers may differ, runs of blanks may differ in width and "..."
stands for any text (a line that is only "..." stands for any lines).

Usage: readme_tmux_test.py path/to/shardlab
"""
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "..", "README.md")
NUMBER = r"-?[0-9][0-9.e+-]*"


def fail(msg, screen=""):
    print("FAIL: " + msg)
    if screen:
        print("--- screen:\n" + screen)
    sys.exit(1)


def session():
    """[(input lines, expected output lines)] from the README's first session."""
    text = open(README, encoding="utf-8").read()
    block = text.split("## A first session", 1)[1].split("```", 2)[1]
    commands = []
    for line in block.splitlines()[1:]:
        if line.startswith("$ "):
            continue
        if line.startswith("sl> "):
            commands.append(([line[4:]], []))
        elif line.startswith("..> "):
            commands[-1][0].append(line[4:])
        elif commands:
            commands[-1][1].append(line)
    return commands


def pattern(expected):
    """A regex for one expected line: numbers and blank runs loose, '...' any text."""
    parts = []
    for piece in re.split(r"(\.\.\.)", expected.strip()):
        if piece == "...":
            parts.append(".*")
            continue
        for token in re.split(r"(\s+|" + NUMBER + ")", piece):
            if not token:
                continue
            if token.isspace():
                parts.append(r"\s+")
            elif re.fullmatch(NUMBER, token):
                parts.append(NUMBER)
            else:
                parts.append(re.escape(token))
    return re.compile(r"^\s*" + "".join(parts) + r"\s*$")


class Repl:
    def __init__(self, binary, tmp):
        self.sock = f"shardlab-readme-{os.getpid()}"
        self.tmux("new-session", "-d", "-s", "repl", "-x", "220", "-y", "60",
                  f"cd '{tmp}' && HOME='{tmp}' SHARDLAB_HISTORY='{tmp}/history' TERM=xterm "
                  f"'{binary}' --db '{tmp}/m.db'; echo SESSION-ENDED; sleep 600")

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.sock, *args], check=True,
                              capture_output=True, text=True).stdout

    def screen(self):
        return self.tmux("capture-pane", "-p", "-J", "-S", "-5000", "-t", "repl")

    def type_line(self, text):
        self.tmux("send-keys", "-t", "repl", "-l", "--", text)
        self.tmux("send-keys", "-t", "repl", "Enter")

    def wait_prompts(self, n, seconds):
        """Waits until the screen shows n prompt lines and ends at an empty prompt."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            lines = [l for l in self.screen().splitlines() if l.strip()]
            prompts = [i for i, l in enumerate(lines) if l.startswith("sl> ") or l == "sl>"]
            if len(prompts) >= n and lines and lines[-1].rstrip() == "sl>":
                return lines
            time.sleep(0.1)
        fail(f"timed out after {seconds} s waiting for prompt {n}", self.screen())

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


def check_output(command, expected, got, screen):
    i = 0
    for want in expected:
        if want.strip() == "...":
            continue
        rx = pattern(want)
        while i < len(got) and not rx.match(got[i]):
            i += 1
        if i == len(got):
            fail(f"after `{command}` the REPL did not print (in order): {want!r}\n"
                 f"it printed:\n" + "\n".join(got), screen)
        i += 1


def main():
    binary = os.path.realpath(sys.argv[1])
    commands = session()
    if len(commands) < 10:
        fail(f"found only {len(commands)} commands in the README's first session")
    with tempfile.TemporaryDirectory() as tmp:
        repl = Repl(binary, tmp)
        try:
            repl.wait_prompts(1, 10)
            prompts = 1
            for inputs, expected in commands:
                for text in inputs:
                    repl.type_line(text)
                prompts += 1
                lines = repl.wait_prompts(prompts, 900)  # 200 training steps on a busy machine
                echo = max(i for i, l in enumerate(lines[:-1]) if l.startswith("sl> "))
                got = [l for l in lines[echo + 1:-1] if not l.startswith("..> ")]
                check_output(inputs[0], expected, got, "\n".join(lines[-60:]))
                print(f"ok: {inputs[0]}")
        finally:
            repl.close()
    print(f"readme_tmux_test: ok ({len(commands)} commands)")


if __name__ == "__main__":
    main()
