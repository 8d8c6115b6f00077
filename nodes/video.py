"""Node types for video that need no model: Create Video, Save Video, Load Video, Video to Frames.

Lives here: those node types and the `NODES` tuple of their specs. Imports `nodes.declare`, `nodes.kinds`,
`nodes.spec`, `nodes.types`, `nodes.context`, `nodes.files`; torch, PyAV and the file code
(`nodes.video_read`, `nodes.video_write`, `pipelines.video.value`) inside the run functions, so listing node
types stays light. The VIDEO value's layout is documented in pipelines/video/value.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.files import prefix_problem, write_new_output
from nodes.kinds import CHOICE, FLOAT, INT, PATH, STRING
from nodes.spec import NodeSpec, Output
from nodes.types import AUDIO, IMAGE, VIDEO
from nodes.types import FLOAT as FLOAT_PORT
from nodes.types import INT as INT_PORT

if TYPE_CHECKING:
    import torch

    from pipelines.video.value import Audio, Video

VIDEO_FILTER = "Videos (*.mp4 *.webm *.webp *.mov *.mkv *.gif);;All files (*)"
FORMATS = ("mp4", "webm", "webp", "png")  # nodes.video_write.VIDEO_FORMATS, without importing it here


def _checked(video: Any) -> Video:
    from pipelines.video.value import video_problem

    problem = video_problem(video)
    if problem is not None:
        raise ValueError(f"input 'video': {problem}")
    return video


@node_type(
    "CreateVideo",
    title="Create Video",
    category="video",
    outputs=[Output("video", VIDEO)],
    description="A video from an image batch (one image per frame, in order), a frame rate and an optional sound track.",
    tags=("frames", "fps", "CreateVideo"),
)
class CreateVideo(Node):
    frames: torch.Tensor = wire(IMAGE, help="an image batch: frame i is image i")
    audio: Audio | None = wire(AUDIO, optional=True)
    fps: float = param(FLOAT, 24.0, min=0.01, max=1000.0, step=1.0, help="frames per second")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.video.value import Video, audio_problem, fps_problem, frames_problem

        frames = self.frames
        if getattr(frames, "ndim", None) == 3 and frames.shape[-1] == 3:
            frames = frames.unsqueeze(0)  # one (H, W, C) picture: a one-frame video
        problem = frames_problem(frames)
        if problem is not None:
            raise ValueError(f"input 'frames': {problem}")
        problem = fps_problem(self.fps)
        if problem is not None:
            raise ValueError(f"field 'fps': {problem}")
        if self.audio is not None and (problem := audio_problem(self.audio)) is not None:
            raise ValueError(f"input 'audio': {problem}")
        return {"video": Video(frames.detach().float().cpu(), float(self.fps), self.audio)}


@node_type(
    "SaveVideo",
    title="Save Video",
    category="output",
    is_output=True,
    imports=("av",),
    description="Write a numbered mp4 (H.264), webm (VP9), animated webp or set of PNG frames, with the workflow embedded.",
    tags=("video", "mp4", "webm", "webp", "SaveVideo", "SaveAnimatedWEBP"),
)
class SaveVideo(Node):
    video: Video = wire(VIDEO)
    prefix: str = param(
        STRING,
        "nodeloom",
        help="File name prefix; a number follows.",
        validate=prefix_problem,
        comfy="filename_prefix",
    )
    format: str = param(
        CHOICE,
        "mp4",
        choices=FORMATS,
        help="mp4: H.264 (+AAC sound); webm: VP9 (+Opus sound); webp: animated, no sound; png: one lossless PNG per frame, no sound",
    )
    crf: int = param(
        INT,
        19,
        min=0,
        max=51,
        help="quality: lower is better and bigger (H.264/VP9 crf); webp: 0 = lossless, else quality 100 - 2*crf",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from nodes.png import tensor_to_pil
        from nodes.video_write import write_png_frames, write_video_file

        video = _checked(self.video)
        if self.format == "png":
            paths = write_png_frames(ctx.out_dir, self.prefix, video, ctx.workflow_json)
            if video.audio is not None:
                ctx.log("png frames have no sound track: the audio was not saved")
        else:
            notes: list[str] = []

            def write(tmp: Path) -> None:
                notes.extend(write_video_file(video, tmp, self.format, ctx.workflow_json, self.crf))

            paths = [write_new_output(ctx.out_dir, self.prefix, f".{self.format}", write)]
            for note in notes:
                ctx.log(note)
        for path in paths:
            ctx.wrote_file(path)
        ctx.metric("video_frames", video.count)
        ctx.metric("video_fps", video.fps)
        ctx.preview(
            tensor_to_pil(video.frames[:1])[0], final=True
        )  # the first frame, until the editor plays video
        return {}


@node_type(
    "LoadVideo",
    title="Load Video",
    category="video",
    outputs=[Output("video", VIDEO)],
    description="Read a video file (mp4, webm, mov, mkv, gif, animated webp): its frames, frame rate and sound.",
    tags=("video", "mp4", "LoadVideo"),
)
class LoadVideo(Node):
    path: str = param(PATH, "", file_filter=VIDEO_FILTER, comfy="file")
    start_frame: int = param(INT, 0, min=0, max=2**31 - 1, help="skip this many frames first")
    frame_limit: int = param(INT, 0, min=0, max=2**31 - 1, help="load at most this many frames; 0 = all")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from nodes.video_read import VideoFileError, load_video
        from pipelines.paths import RESOURCES_DIR

        # builtin:NAME is a clip shipped in resources/videos (the example workflows' inputs).
        file = (
            RESOURCES_DIR / "videos" / self.path.removeprefix("builtin:")
            if self.path.startswith("builtin:")
            else Path(self.path).expanduser()
        )
        if not self.path or not file.is_file():
            raise FileNotFoundError(
                f"field 'path': no video at {file}" if self.path else "field 'path': choose a video file"
            )
        try:
            video = load_video(file, self.start_frame, self.frame_limit)
        except VideoFileError as exc:
            raise ValueError(f"field 'path': {file}: {exc}") from None
        ctx.log(
            f"{video.count} frames of {video.size[0]}x{video.size[1]} at {video.fps:g} fps"
            + (f", {video.audio.seconds:.2f}s of sound" if video.audio is not None else "")
        )
        return {"video": video}


@node_type(
    "VideoToFrames",
    title="Video to Frames",
    category="video",
    outputs=[
        Output("frames", IMAGE),
        Output("fps", FLOAT_PORT),
        Output("audio", AUDIO),
        Output("count", INT_PORT),
    ],
    description="The video's frames as an image batch, its frame rate, its sound track (if any) and frame count.",
    tags=("video", "frames", "GetVideoComponents"),
)
class VideoToFrames(Node):
    video: Video = wire(VIDEO)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        video = _checked(self.video)
        return {"frames": video.frames, "fps": float(video.fps), "audio": video.audio, "count": video.count}


NODES: tuple[NodeSpec, ...] = tuple(n.spec for n in (CreateVideo, SaveVideo, LoadVideo, VideoToFrames))
