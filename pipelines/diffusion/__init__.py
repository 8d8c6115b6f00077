"""Diffusion pipelines split into nodes: loaders, prompt encoding, our denoising loop, VAE, demo models.

May import: stdlib, torch, diffusers, transformers, tokenizers, safetensors, PIL, memory, pipelines.paths.
Never nodes/, app/ or Qt. This package file imports nothing: import the module you need
(`from pipelines.diffusion.denoising import sample`), so that reading `families` or `schedulers` (node
choices) costs no diffusers import.

Modules, by concept:
  families      what differs between SD1.x/2.x, SDXL, PixArt-Sigma, SD3, Flux, Z-Image and Qwen-Image (data, not branches): the
                one family registry, with the single-file checkpoint layouts as its variants
  lazy_models   diffusers' model packages imported one model file at a time (start-up)
  family_detect which family a folder, file header or file name is (the registry's one detector)
  values        the values on wires: DenoiserRef, TextEncoderRef, VaeRef, Conditioning, Latents
  loading       diffusers folders and separate component files -> lazy memory-manager handles
  single_file   original-format .safetensors checkpoints (SD1.x, SDXL), offline with shipped configs
  export        the inverse: write SD1.x / SDXL as an original-format single file
  conditioning  encode_prompt per family (mirrors the diffusers pipelines)
  schedulers    sampler names -> diffusers scheduler classes
  sampling      what every denoising loop shares: settings, step reports, conditioning batches
  denoising     `sample`, the one entry: the DDPM-style loop (SD, SDXL, PixArt) with per-step callbacks
  k_sampling    ComfyUI's k-diffusion samplers over its sigma schedules
  flow_sampling the flow-matching loops (Flux, SD3)
  zimage_text   Z-Image's prompt encoding: Qwen3 through the folder tokenizer's chat template
  zimage_sampling  Z-Image's loop (its own CFG rule, list inputs, negated velocity)
  qwenimage_text  Qwen-Image's prompt encoding: Qwen2.5-VL through the pipeline's prompt template
  qwenimage_sampling  Qwen-Image's loop (true CFG with its norm rescale, packed latents, img_shapes)
  qwenimage_working  the Qwen-Image transformer's working-memory facts
  wan_text / wan_sampling / video_vae  Wan: UMT5 (512 zero-padded tokens), the 5D loop with 2.2's two experts,
                the video VAE decode; demo_wan builds tiny-wan / tiny-wan22
  vae           decode / encode between latents and IMAGE tensors
  previews      latent -> RGB preview images
  demo_models   tiny random-weight models built offline (demo:tiny-sd, tiny-sdxl, tiny-pixart, tiny-sd3,
                tiny-flux, tiny-zimage from demo_zimage, tiny-qwenimage from demo_qwenimage); imported only for a `demo:` path or
                `app models make-demo`
"""
