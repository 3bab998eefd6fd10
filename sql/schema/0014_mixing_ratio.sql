-- layer_mixing.mixing_ratio becomes the ratio Kobayashi et al. (2021) define and compute: with
-- c_ij the full post-LayerNorm contribution vectors (every head and, for j = i, the residual),
-- m_i = ||Σ_{j≠i} c_ij||, p_i = ||c_ii|| and ratio_i = m_i / (m_i + p_i), mean over query rows.
-- Until now the column held the share of summed norms, Σ_{j≠i} ||c_ij|| / Σ_j ||c_ij||, which is
-- larger (contributions of different tokens partly cancel in the vector sum). That quantity
-- moves to mixing_share. The ratio cannot be rebuilt from stored rows: it is NULL for rows
-- written before this migration; `attnwh ingest --replace` on the same run computes it.

ALTER TABLE layer_mixing ADD COLUMN mixing_share REAL;
UPDATE layer_mixing SET mixing_share = mixing_ratio, mixing_ratio = NULL;

COMMENT ON COLUMN layer_mixing.mixing_ratio IS 'Kobayashi et al.''s mixing ratio m_i / (m_i + p_i), m_i = ||Σ_{j≠i} c_ij||, p_i = ||c_ii|| over the full contribution vectors c_ij (every head and, for j = i, the residual) after LayerNorm, mean over query rows; NULL for pre-LN models and for rows written before migration 14.';
COMMENT ON COLUMN layer_mixing.mixing_share IS 'Σ_{j≠i} ||c_ij|| / Σ_j ||c_ij||: the share of the summed contribution norms that comes from other tokens (larger than mixing_ratio, where the vectors partly cancel), mean over query rows; NULL for pre-LN models.';
