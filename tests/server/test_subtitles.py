"""front.subtitles: SubRip and WebVTT cues from timed segments."""

from model import Segment

from server.front.subtitles import cue_text, srt, timestamp, vtt


def segment(start, end, text):
    return Segment(start, end, text, (), 0.0)


def test_timestamps_round_to_milliseconds_past_the_hour():
    assert timestamp(0.0, ",") == "00:00:00,000"
    assert timestamp(3.0044, ".") == "00:00:03.004"
    assert timestamp(3725.4996, ",") == "01:02:05,500"
    assert timestamp(-0.01, ",") == "00:00:00,000"


def test_cue_text_has_no_leading_space_and_no_blank_line():
    assert cue_text(" forty-two") == "forty-two"
    assert cue_text(" one\n\n two ") == "one\ntwo"


def test_srt_and_vtt():
    segments = [segment(0.0, 1.5, " one"), segment(61.25, 3600.0, " two")]
    assert srt(segments) == "1\n00:00:00,000 --> 00:00:01,500\none\n\n2\n00:01:01,250 --> 01:00:00,000\ntwo\n\n"
    assert vtt(segments) == "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\none\n\n00:01:01.250 --> 01:00:00.000\ntwo\n\n"
    assert srt([]) == "" and vtt([]) == "WEBVTT\n\n"


def test_a_segment_without_text_makes_no_cue():
    """A blank line ends a cue: an empty one would cut the file short for its readers."""
    segments = [segment(0.0, 1.0, " one"), segment(1.0, 2.0, " "), segment(2.0, 3.0, " three")]
    assert srt(segments) == "1\n00:00:00,000 --> 00:00:01,000\none\n\n2\n00:00:02,000 --> 00:00:03,000\nthree\n\n"
    assert vtt(segments).count(" --> ") == 2
