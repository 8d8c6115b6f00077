"""ComfyUI's samplers on MiniMax H3 (res_multistep, uni_pc, dpmpp_2m, heun, ...): the k-diffusion loops over
ComfyUI's flow sigmas and one packed state of video and sound, so that the H3 templates' `res_multistep` /
`simple` sampler runs here as ComfyUI runs it.

Lives here: `MINIMAX_K_SAMPLERS`, `time_shift_sigma`, `PackedDenoiser`, `sample_minimax_k`. May import: stdlib,
torch, memory, pipelines.steps, pipelines.diffusion.* (the samplers, the schedules, the H3 loop's helpers).

What ComfyUI does with MiniMax H3 (comfy/ldm/minimax/model.py, `ModelSamplingAV` in comfy/model_sampling.py,
comfy_extras/nodes_minimax_h3.py), and so what this does:
- one noise level for the whole request, the *video* sigma: its levels are ModelSamplingDiscreteFlow's at the
  video shift (12, or MiniMax H3 Sigma Shift's), from which the named schedule (simple, normal, ...) picks the
  steps (`wan_k_sampling.flow_sigmas`, `k_sampling`'s schedule code);
- the sound runs on its own shifted schedule, derived in closed form: the video sigma taken back to the
  unshifted grid and the audio shift applied (`time_shift_sigma`); the transformer sees t = 1 - sigma per row;
- the sampler steps one state: the video latent as it is, and the audio latent *carried on the video clock*,
  y = x_audio x sigma_video / sigma_audio. With both sigmas from one base grid, y = sigma_v x noise +
  (1 - sigma_v) x (s x audio_0), s = shift_video / shift_audio: an ordinary flow interpolant at the video sigma
  whose clean end is s x the audio latent. ComfyUI's forward converts the audio velocity to that variable's
  (`out = (1 - s) x_a + (1 + (s - 1) sigma_a) v_a`); here the clean estimates are returned directly (video
  x + sigma_v v, audio s x (x_a + sigma_a v_a), H3's velocity points data-ward), which is the same denoiser,
  and the end divides the audio by s;
- the samplers are the k-diffusion ones ComfyUI runs unchanged on flow models (its ancestral, SDE and LCM
  samplers take `_RF` steps there: refused by name, as in Wan's loop). Euler over this state is exactly the
  two per-modality Euler schedules of the model's own loop (`tests/test_minimax_k_sampling.py` checks it).
Noise, keyframe anchors (and ref2va's reference pictures) and the packed layout are the model's own loop's (`minimax_sampling.packed_start`:
one CPU generator in the pipeline's order), not ComfyUI's NestedTensor draw; none of these samplers draws
noise per step.
"""

from __future__ import annotations

import torch

from memory import MemoryManager
from pipelines.diffusion.k_samplers import K_SAMPLERS, SeededNoise
from pipelines.diffusion.k_sampling import _sigmas_for
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.minimax_layout import row_timesteps
from pipelines.diffusion.minimax_refs import ref2va_denoiser
from pipelines.diffusion.minimax_sampling import (
    AUDIO_SCHEDULER_KEY,
    PackedStart,
    check_request,
    minimax_working,
    packed_start,
    unpack_result,
)
from pipelines.diffusion.minimax_vae import still_request
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.schedulers import FLOW_K_SAMPLERS, K_PREFIX
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.diffusion.wan_k_sampling import flow_sigmas
from pipelines.steps import OnStep, Step

# ComfyUI runs these unchanged on a flow model; euler here is for the tests (k_euler runs the model's own loop).
MINIMAX_K_SAMPLERS = ("euler", *FLOW_K_SAMPLERS)
# ComfyUI clamps the video sigma at this before deriving the audio one (comfy/ldm/minimax/model.py).
_SIGMA_FLOOR = 1e-6


def time_shift_sigma(sigma: float, from_shift: float, to_shift: float) -> float:
    """A sigma of the `from_shift` schedule taken back to the unshifted grid, then shifted by `to_shift`."""
    base = sigma / (from_shift + sigma * (1.0 - from_shift))
    return to_shift * base / (1.0 + (to_shift - 1.0) * base)


def _shifts(denoiser: DenoiserRef) -> tuple[float, float]:
    config = denoiser.scheduler_config
    audio = config.get(AUDIO_SCHEDULER_KEY, {})
    return float(config.get("shift", 12.0)), float(audio.get("shift", 3.0))


def _check(denoiser: DenoiserRef, positive: Conditioning, latents: Latents, settings: SamplerSettings) -> str:
    name = settings.scheduler.removeprefix(K_PREFIX)
    title = denoiser.family.title
    if name not in MINIMAX_K_SAMPLERS:
        raise ValueError(
            f"{title} runs the samplers {', '.join(FLOW_K_SAMPLERS)} (and euler, default); {name!r} takes "
            "other steps on a flow-matching model in ComfyUI and is not written here"
        )
    if settings.start_step > 0 or settings.end_step < settings.steps:
        raise ValueError(
            f"{title}: a segment of the schedule (start_step / end_step) is not supported, run all the steps"
        )
    check_request(denoiser, positive, latents, settings)
    return name


class PackedDenoiser:
    """`(state, sigma_video) -> clean state`: one transformer call over the packed sequence, the state being
    the target video rows then the audio rows carried on the video clock (flattened, as the samplers step
    any tensor)."""

    def __init__(self, model: torch.nn.Module, start: PackedStart, shift_video: float, shift_audio: float):
        self.model, self.start = model, start
        self.shift_video, self.shift_audio = shift_video, shift_audio
        self.scale = shift_video / shift_audio  # the carried audio's clean end is scale x the audio latent
        self.anchors = start.x[: start.kept]
        self.video_shape, self.audio_shape = start.x[start.kept :].shape, start.audio.shape
        self.video_size = start.x[start.kept :].numel()

    def split(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """state -> (video rows, carried audio rows)."""
        video, audio = state[: self.video_size], state[self.video_size :]
        return video.reshape(self.video_shape), audio.reshape(self.audio_shape)

    def audio_sigma(self, sigma: float) -> float:
        return time_shift_sigma(sigma, self.shift_video, self.shift_audio)

    def __call__(self, state: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s = max(float(sigma), _SIGMA_FLOOR)
        s_audio = self.audio_sigma(s)
        video, carried = self.split(state)
        video = self.start.repad(video)  # a still's patch padding, made from the latent for each call
        audio = carried * (s_audio / s)  # the audio latent itself, at its own sigma
        rows = torch.cat([self.anchors, video]) if self.start.kept else video
        unique, index = (v.to(state.device) for v in row_timesteps(self.start.layout, 1.0 - s, 1.0 - s_audio))
        v, va = self.model(
            hidden_states=rows[None],
            audio_hidden_states=audio[None],
            encoder_hidden_states=self.start.text,
            timestep=unique,
            timestep_indices=index,
            return_dict=False,
            **self.start.fields,
        )
        video_0 = video + s * v[0, self.start.kept :].float()  # H3's velocity points data-ward
        audio_0 = audio + s_audio * va[0].float()
        return torch.cat([video_0.flatten(), (self.scale * audio_0).flatten()])


@torch.no_grad()
def sample_minimax_k(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    # 1. Check inputs (an image latent is a still: one frame, no sound rows)
    latents = still_request(denoiser, latents)
    name = _check(denoiser, positive, latents, settings)

    # 2. Prepare sigmas: ComfyUI's flow levels at the video shift, the named schedule
    shift_video, shift_audio = _shifts(denoiser)
    sigmas = _sigmas_for(settings, flow_sigmas(shift_video)).to(mm.device)
    if float(sigmas[-1]) != 0.0:
        raise ValueError(
            f"{denoiser.family.title}: the schedule must end at sigma 0, got {float(sigmas[-1])}"
        )

    # 3. Prepare latent variables: the model's own loop's noise; at sigma 1 the carried audio is the noise
    start = packed_start(mm, denoiser, positive, latents, settings.seed)
    first = float(sigmas[0])
    if abs(first - 1.0) > 1e-6:  # full denoise starts at the flow levels' top, 1 (denoise < 1 is refused)
        raise ValueError(f"{denoiser.family.title}: the schedule must start at sigma 1, got {first}")
    state = torch.cat([start.x[start.kept :].flatten(), start.audio.flatten()])

    # 4. Denoising loop: the sampler calls `denoise` once per model call, each step reports through `done`
    _, channels, frames, _, _ = latents.samples.shape
    total = len(sigmas) - 1
    model_ref = ref2va_denoiser(denoiser, latents)  # ref2va: the folder's transformer_ref partition
    with use_denoiser(mm, model_ref, working=minimax_working(denoiser, start.tokens)) as model:
        denoise = PackedDenoiser(model, start, shift_video, shift_audio)

        def done(i: int, now: torch.Tensor) -> None:
            if on_step is not None:
                video, _ = denoise.split(now)
                frame = start.video(video, channels, frames)[:, :, frames // 2]
                on_step(Step(i + 1, total, timestep=1.0 - float(sigmas[i]), latents=frame))

        state = K_SAMPLERS[name](denoise, state, sigmas, SeededNoise(state, settings.seed), done)

    # 5. Unpack: at sigma 0 the carried audio is scale x the audio latent
    video, carried = denoise.split(state)
    return unpack_result(start, video, carried / denoise.scale, latents)
