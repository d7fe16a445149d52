"""The LSQR (Paige and Saunders, 1982) and LSMR (Fong and Saunders, 2011) iterations:
Golub-Kahan bidiagonalization of `A` from the residual `b - A x0`, each in one
`lax.while_loop`, with scipy's estimates of the norms and its stopping tests (`istop`).

Each loop takes `A` as two functions (`matvec: v -> A v`, `rmatvec: u -> A^H u`) and its
scalars (`damp`, the tolerances) as 0-d arrays of the solve's real dtype, so it batches
under `jax.vmap` (a batch iterates until its last member stops). The bidiagonal recurrence
works on real scalars for complex `A` too: every `alpha` and `beta` is a vector norm.
"""

import jax
import jax.numpy as jnp
from jax import lax


def lsqr_loop(matvec, rmatvec, x0, residual, b_norm, scalars, limit: int, calc_var: bool):
    """LSQR from `x0` (whose residual is `residual`) for `min ||A x - b||^2 + damp^2
    ||x - x0||^2`: `(x, istop, itn, r1norm, r2norm, anorm, acond, arnorm, xnorm, var)`."""
    damp, atol, btol, ctol = scalars
    real = b_norm.dtype
    zero = jnp.zeros((), real)
    eps = jnp.finfo(real).eps
    damped = damp > 0
    dampsq = damp**2
    u, beta = _normalized(residual)
    v, alfa = _normalized(rmatvec(u))
    initial = {
        "x": x0, "u": u, "v": v, "w": v, "alfa": alfa, "rhobar": alfa, "phibar": beta,
        "anorm": zero, "ddnorm": zero, "res2": zero, "xxnorm": zero, "z": zero,
        "cs2": -jnp.ones((), real), "sn2": zero, "var": jnp.zeros(x0.shape, real),
        "itn": jnp.int32(0), "istop": jnp.int32(0), "r1norm": beta, "r2norm": beta,
        "acond": zero, "arnorm": alfa * beta, "xnorm": zero,
    }  # fmt: skip
    # scipy's first test: `A^H r = 0` (a zero residual, or one orthogonal to `A`'s range).
    trivial = initial["arnorm"] == 0

    def unfinished(s):
        return ~trivial & (s["istop"] == 0) & (s["itn"] < limit)

    def step(s):
        s = dict(s)
        s["itn"] = itn = s["itn"] + 1
        u, beta = _normalized(matvec(s["v"]) - _times(s["alfa"], s["u"]))
        grown = beta > 0  # else the Krylov space is whole: `u`, `v` and `alfa` stay
        anorm = jnp.sqrt(s["anorm"] ** 2 + s["alfa"] ** 2 + beta**2 + dampsq)
        anorm = jnp.where(grown, anorm, s["anorm"])
        v, alfa = _normalized(rmatvec(u) - _times(beta, s["v"]))
        v = jnp.where(grown, v, s["v"])
        alfa = jnp.where(grown, alfa, s["alfa"])
        # The damping rotation only where `damp > 0`, as scipy's (it would flip signs).
        rhobar, phibar = s["rhobar"], s["phibar"]
        rhobar1 = jnp.where(damped, jnp.hypot(rhobar, damp), rhobar)
        denominator = jnp.where(damped, rhobar1, 1)
        cs1 = jnp.where(damped, rhobar / denominator, 1)
        psi = jnp.where(damped, damp / denominator, 0) * phibar
        phibar = cs1 * phibar
        cs, sn, rho = sym_ortho(rhobar1, beta)
        theta = sn * alfa
        rhobar = -cs * alfa
        phi = cs * phibar
        phibar = sn * phibar
        tau = sn * phi
        w = s["w"]
        dk = _times(1 / rho, w)
        s["x"] = s["x"] + _times(phi / rho, w)
        s["w"] = v + _times(-theta / rho, w)
        s["ddnorm"] = ddnorm = s["ddnorm"] + jnp.sum(jnp.abs(dk) ** 2)
        if calc_var:
            s["var"] = s["var"] + jnp.abs(dk) ** 2
        # The norm of `x`'s correction, from the bidiagonal system's own QR.
        delta = s["sn2"] * rho
        gambar = -s["cs2"] * rho
        rhs = phi - delta * s["z"]
        zbar = rhs / gambar
        s["xnorm"] = xnorm = jnp.sqrt(s["xxnorm"] + zbar**2)
        gamma = jnp.hypot(gambar, theta)
        s["cs2"], s["sn2"], s["z"] = gambar / gamma, theta / gamma, rhs / gamma
        s["xxnorm"] = xxnorm = s["xxnorm"] + s["z"] ** 2
        s["acond"] = acond = anorm * jnp.sqrt(ddnorm)
        s["res2"] = s["res2"] + psi**2
        rnorm = jnp.sqrt(phibar**2 + s["res2"])
        s["arnorm"] = arnorm = alfa * jnp.abs(tau)
        r1sq = rnorm**2 - dampsq * xxnorm  # `||b - A x||^2`, negative by rounding
        s["r1norm"] = jnp.where(damped, jnp.sign(r1sq) * jnp.sqrt(jnp.abs(r1sq)), rnorm)
        s["r2norm"] = rnorm
        test1 = rnorm / b_norm
        s["istop"] = istop(
            itn, limit, atol, btol, ctol,
            test1=test1,
            test2=arnorm / (anorm * rnorm + eps),
            test3=1 / (acond + eps),
            scaled=anorm * xnorm / b_norm,
        )  # fmt: skip
        s.update(u=u, v=v, alfa=alfa, rhobar=rhobar, phibar=phibar, anorm=anorm)
        return s

    s = lax.while_loop(unfinished, step, initial)
    names = ("x", "istop", "itn", "r1norm", "r2norm", "anorm", "acond", "arnorm", "xnorm", "var")
    return tuple(s[name] for name in names)


def lsmr_loop(matvec, rmatvec, x0, residual, b_norm, scalars, limit: int):
    """LSMR from `x0` (whose residual is `residual`) for `min ||A x - b||^2 + damp^2
    ||x - x0||^2`: `(x, istop, itn, normr, normar, norma, conda, normx)`."""
    damp, atol, btol, ctol = scalars
    real = b_norm.dtype
    zero = jnp.zeros((), real)
    one = jnp.ones((), real)
    u, beta = _normalized(residual)
    v, alpha = _normalized(rmatvec(u))
    initial = {
        "x": x0, "u": u, "v": v, "h": v, "hbar": jnp.zeros_like(v), "alpha": alpha,
        "zetabar": alpha * beta, "alphabar": alpha, "rho": one, "rhobar": one, "cbar": one,
        "sbar": zero, "betadd": beta, "betad": zero, "rhodold": one, "tautildeold": zero,
        "thetatilde": zero, "zeta": zero, "d": zero, "norma2": alpha**2, "maxrbar": zero,
        "minrbar": jnp.full((), jnp.inf, real), "itn": jnp.int32(0), "istop": jnp.int32(0),
        "normr": beta, "normar": alpha * beta, "norma": alpha, "conda": one, "normx": zero,
    }  # fmt: skip
    trivial = initial["normar"] == 0

    def unfinished(s):
        return ~trivial & (s["istop"] == 0) & (s["itn"] < limit)

    def step(s):
        s = dict(s)
        s["itn"] = itn = s["itn"] + 1
        u, beta = _normalized(matvec(s["v"]) - _times(s["alpha"], s["u"]))
        grown = beta > 0
        v, alpha = _normalized(rmatvec(u) - _times(beta, s["v"]))
        v = jnp.where(grown, v, s["v"])
        alpha = jnp.where(grown, alpha, s["alpha"])
        # Rotations: `Qhat` takes the damping out, `Q` makes `R` upper bidiagonal.
        chat, shat, alphahat = sym_ortho(s["alphabar"], damp)
        rhoold = s["rho"]
        c, sn, rho = sym_ortho(alphahat, beta)
        thetanew = sn * alpha
        s["alphabar"] = c * alpha
        # `Qbar` makes `Rbar`, the bidiagonal of the normal equations' iterate.
        rhobarold, zetaold = s["rhobar"], s["zeta"]
        thetabar = s["sbar"] * rho
        rhotemp = s["cbar"] * rho
        s["cbar"], s["sbar"], s["rhobar"] = cbar, sbar, rhobar = sym_ortho(rhotemp, thetanew)
        s["zeta"] = zeta = cbar * s["zetabar"]
        s["zetabar"] = zetabar = -sbar * s["zetabar"]
        hbar = s["h"] + _times(-(thetabar * rho / (rhoold * rhobarold)), s["hbar"])
        s["x"] = x = s["x"] + _times(zeta / (rho * rhobar), hbar)
        s["h"] = v + _times(-(thetanew / rho), s["h"])
        s["hbar"] = hbar
        # `||r||` from the rotations applied to `beta e1`.
        betaacute = chat * s["betadd"]
        betacheck = -shat * s["betadd"]
        betahat = c * betaacute
        s["betadd"] = betadd = -sn * betaacute
        thetatildeold = s["thetatilde"]
        ctildeold, stildeold, rhotildeold = sym_ortho(s["rhodold"], thetabar)
        s["thetatilde"] = thetatilde = stildeold * rhobar
        s["rhodold"] = rhodold = ctildeold * rhobar
        s["betad"] = betad = -stildeold * s["betad"] + ctildeold * betahat
        tautildeold = (zetaold - thetatildeold * s["tautildeold"]) / rhotildeold
        s["tautildeold"] = tautildeold
        taud = (zeta - thetatilde * tautildeold) / rhodold
        s["d"] = d = s["d"] + betacheck**2
        s["normr"] = normr = jnp.sqrt(d + (betad - taud) ** 2 + betadd**2)
        # `||A||` (Frobenius) and `cond(A)` estimates from the bidiagonal's entries.
        s["norma"] = norma = jnp.sqrt(s["norma2"] + beta**2)
        s["norma2"] = s["norma2"] + beta**2 + alpha**2
        s["maxrbar"] = jnp.maximum(s["maxrbar"], rhobarold)
        s["minrbar"] = jnp.where(itn > 1, jnp.minimum(s["minrbar"], rhobarold), s["minrbar"])
        s["conda"] = conda = jnp.maximum(s["maxrbar"], rhotemp) / jnp.minimum(s["minrbar"], rhotemp)
        s["normar"] = jnp.abs(zetabar)
        s["normx"] = normx = jnp.linalg.norm(x)
        product = norma * normr
        nonzero = product != 0
        s["istop"] = istop(
            itn, limit, atol, btol, ctol,
            test1=normr / b_norm,
            test2=jnp.where(nonzero, s["normar"] / jnp.where(nonzero, product, 1), jnp.inf),
            test3=1 / conda,
            scaled=norma * normx / b_norm,
        )  # fmt: skip
        s.update(u=u, v=v, alpha=alpha, rho=rho)
        return s

    s = lax.while_loop(unfinished, step, initial)
    return tuple(
        s[name] for name in ("x", "istop", "itn", "normr", "normar", "norma", "conda", "normx")
    )


def istop(itn, limit: int, atol, btol, ctol, *, test1, test2, test3, scaled) -> jax.Array:
    """scipy's `istop` after iteration `itn`, the smallest code that holds: 1 (`||r|| <=
    btol ||b|| + atol ||A|| ||x||`), 2 (`||A^H r|| <= atol ||A|| ||r||`), 3 (`cond(A) >=
    conlim`), 4 to 6 (the same at machine precision), 7 (`limit` reached), else 0."""
    code = jnp.where(itn >= limit, 7, 0)
    code = jnp.where(1 + test3 <= 1, 6, code)
    code = jnp.where(1 + test2 <= 1, 5, code)
    code = jnp.where(1 + test1 / (1 + scaled) <= 1, 4, code)
    code = jnp.where(test3 <= ctol, 3, code)
    code = jnp.where(test2 <= atol, 2, code)
    code = jnp.where(test1 <= btol + atol * scaled, 1, code)
    return code.astype(jnp.int32)


def sym_ortho(a, b):
    """The Givens rotation `(c, s, r)` with `[c s; -s c] [a; b] = [r; 0]`, `r = hypot(a, b)
    >= 0` (scipy's `_sym_ortho`; all zero for `a = b = 0`)."""
    r = jnp.hypot(a, b)
    safe = jnp.where(r > 0, r, 1)
    return a / safe, b / safe, r


def _normalized(y):
    """`(y / ||y||, ||y||)`; a zero `y` stays zero."""
    norm = jnp.linalg.norm(y)
    return _times(1 / jnp.where(norm > 0, norm, 1), y), norm


def _times(scalar, vector):
    """A real scalar times a (real or complex) vector, in the vector's dtype."""
    return scalar.astype(vector.dtype) * vector
