//! Tensor maps at launch: a [`TensorMapSpec`] checked by core, then encoded
//! by `cuTensorMapEncodeTiled` into the 128-byte, 64-byte aligned
//! `CUtensorMap` a TMA kernel takes by value. Only the launch path uses it.

use tensorwasm_core::{TensorMapDtype, TensorMapSpec, TensorMapSwizzle};

use crate::{context::Context, error::CudaError, result, sys};

fn data_type(dtype: TensorMapDtype) -> sys::CUtensorMapDataType {
    use sys::CUtensorMapDataType as T;
    match dtype {
        TensorMapDtype::U8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        TensorMapDtype::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        TensorMapDtype::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        TensorMapDtype::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        // Rounds to nearest, ties to even, and keeps subnormals (the _FTZ
        // type would flush them).
        TensorMapDtype::Tf32 => T::CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
    }
}

fn swizzle(swizzle: TensorMapSwizzle) -> sys::CUtensorMapSwizzle {
    use sys::CUtensorMapSwizzle as S;
    match swizzle {
        TensorMapSwizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        TensorMapSwizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        TensorMapSwizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        TensorMapSwizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
    }
}

/// Checks `spec` and encodes it: element strides 1, interleave none, L2
/// promotion 256 B, elements outside the tensor read as zero. The context
/// must be current. A refusal (core's check or the driver's) is an
/// `Invalid` error naming `kernel` and parameter `index`.
pub(crate) fn encode(
    ctx: &Context,
    kernel: &str,
    index: usize,
    spec: &TensorMapSpec,
) -> Result<sys::CUtensorMap, CudaError> {
    let refused = |why: String| {
        CudaError::invalid(
            "launch",
            format!("kernel `{kernel}` parameter {index} (tensor map): {why}"),
        )
    };
    spec.validate().map_err(|e| refused(e.to_string()))?;
    let element_strides = [1u32; tensorwasm_core::launch::TENSOR_MAP_MAX_RANK];
    let mut map = sys::CUtensorMap::default();
    // SAFETY: the slices hold `rank` dimensions and box dimensions and
    // `rank - 1` strides (validate checked the rank), which is what the call
    // reads; `map` is a 64-byte aligned CUtensorMap (bindgen's repr(align(64)))
    // the call writes. The call only encodes: it reads no device memory, so
    // the base address is not dereferenced here (validate checked it and the
    // extent against the address space; what the kernel reads through the
    // map is the launch's contract).
    let encoded = unsafe {
        result::cuTensorMapEncodeTiled(
            &ctx.lib,
            &mut map,
            data_type(spec.dtype),
            spec.base.0,
            spec.dims(),
            spec.strides(),
            spec.box_dims(),
            element_strides.get(..spec.dims().len()).unwrap_or_default(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle(spec.swizzle),
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    match encoded {
        Ok(()) => Ok(map),
        Err(CudaError::Driver {
            call,
            name,
            description,
            ..
        }) => Err(refused(format!(
            "{call} refused {spec:?}: {name} ({description})"
        ))),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_is_128_bytes_64_aligned() {
        assert_eq!(
            std::mem::size_of::<sys::CUtensorMap>(),
            tensorwasm_core::launch::TENSOR_MAP_PARAM_BYTES
        );
        assert_eq!(
            std::mem::align_of::<sys::CUtensorMap>(),
            tensorwasm_core::launch::TENSOR_MAP_ALIGN
        );
    }

    #[test]
    fn enums_match_cuda_h() {
        assert_eq!(data_type(TensorMapDtype::U8).0, 0);
        assert_eq!(data_type(TensorMapDtype::F16).0, 6);
        assert_eq!(data_type(TensorMapDtype::F32).0, 7);
        assert_eq!(data_type(TensorMapDtype::Bf16).0, 9);
        // CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, not 12 (TFLOAT32_FTZ).
        assert_eq!(data_type(TensorMapDtype::Tf32).0, 11);
        assert_eq!(
            data_type(TensorMapDtype::Tf32),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
        );
        assert_eq!(swizzle(TensorMapSwizzle::None).0, 0);
        assert_eq!(swizzle(TensorMapSwizzle::B128).0, 3);
    }
}
